package tests

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestServeNamesFolderItCannotWrite is the compose upgrade path: the
// sidecar now runs as uid 0 with only its witnesses' capabilities, and a
// state volume made by the earlier uid-10001 sidecar is owned by 10001,
// mode 0700. Root without CAP_DAC_OVERRIDE (and the other capabilities
// that bypass file permissions) cannot write there: serve must stop at
// start and say which folder, who owns it and how to fix it, instead of a
// bare "permission denied" on the host key. After the fix it serves.
func TestServeNamesFolderItCannotWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs serve as uid 0 without CAP_DAC_OVERRIDE on a folder owned by uid 10001")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not installed")
	}
	bin := buildForLiveTest(t)
	work := t.TempDir()
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(work, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, 10001, 10001); err != nil {
		t.Fatal(err)
	}
	// The compose sidecar's capability set: NET_RAW alone.
	noBypass := []string{"--inh-caps=-all", "--bounding-set=-all,+net_raw", "--"}
	// --pcap-host-netns: the test runs serve in its own network namespace,
	// which may be the host's initial one, where pcap is otherwise off.
	serveArgs := []string{bin, "serve", "--listen", "127.0.0.1:0", "--state-dir", state, "--root", filepath.Join(work, "captures"),
		"--ready-file", filepath.Join(work, "ready"), "--pcap-host-netns"}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, setpriv, append(noBypass, serveArgs...)...)
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("serve on a uid-10001 state folder: want exit status 1, got %v\n%s", err, out)
	}
	for _, want := range []string{"state directory " + state, "owned by uid 10001 gid 10001, mode 0700", "without CAP_DAC_OVERRIDE", "chown -R 0:0"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("serve's error does not say %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "captures")); err == nil {
		t.Error("serve made the capture root although it could not start")
	}

	// The fix the message names; then the same capability set serves, and
	// its pcap witness works (NET_RAW is its one capability).
	if err := os.Chown(state, 0, 0); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(setpriv, append(noBypass, serveArgs...)...)
	srv.Dir = work
	logs := &testutil.LockedBuffer{}
	srv.Stdout, srv.Stderr = logs, logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	var ready []byte
	waitFor(t, 20*time.Second, "the readiness file after the chown", func() bool {
		ready, _ = os.ReadFile(filepath.Join(work, "ready"))
		return len(ready) > 0
	})
	if !strings.Contains(string(ready), "\npcap=ok\n") {
		t.Errorf("readiness with NET_RAW only: want pcap=ok, got\n%s\nlogs:\n%s", ready, logs.String())
	}
}
