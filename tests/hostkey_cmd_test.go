package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

// TestHostKeyNeverCreates: on an empty state directory hostkey fails
// clearly and creates nothing; --create makes the key; then stdout holds
// the known_hosts line alone, so `hostkey >> known_hosts` is right, and the
// fingerprint goes to stderr.
func TestHostKeyNeverCreates(t *testing.T) {
	bin := buildCommand(t)
	state := filepath.Join(t.TempDir(), "state")
	hostkey := func(extra ...string) (string, string, error) {
		cmd := exec.Command(bin, append([]string{"hostkey", "--state-dir", state, "--host", "[lab]:2222"}, extra...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	stdout, stderr, err := hostkey()
	if err == nil || stdout != "" || !strings.Contains(stderr, "no host key at") || !strings.Contains(stderr, "--create") {
		t.Fatalf("on an empty state dir: err %v, stdout %q, stderr %q; want a clear failure", err, stdout, stderr)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("hostkey created %s", state)
	}
	if _, _, err := hostkey("--create"); err != nil {
		t.Fatalf("--create: %v", err)
	}
	stdout, stderr, err = hostkey()
	if err != nil {
		t.Fatal(err)
	}
	_, hosts, pub, _, rest, err := gossh.ParseKnownHosts([]byte(stdout))
	if err != nil || len(rest) != 0 || len(hosts) != 1 || hosts[0] != "[lab]:2222" {
		t.Fatalf("stdout %q is not one known_hosts line: %v", stdout, err)
	}
	if strings.TrimSpace(stderr) != gossh.FingerprintSHA256(pub) {
		t.Errorf("stderr %q, want the fingerprint %s", stderr, gossh.FingerprintSHA256(pub))
	}
}
