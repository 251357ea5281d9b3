package tests

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// TestHostileCaptureFolderDoesNotHangStartup leaves two unfinalized
// sessions whose typescript is not a regular file: a symbolic link to
// /dev/zero (endless bytes) and a named pipe (an open that blocks). The
// restarted server must not read either: it starts, listens and logs the
// folders it could not recover, and verify reports them.
func TestHostileCaptureFolderDoesNotHangStartup(t *testing.T) {
	bin := buildForLiveTest(t)
	work := t.TempDir()
	root := filepath.Join(work, "aptl-dev", "captures")
	signer := newTestSigner(t)
	zero := recordertest.Unfinalized(t, root, "_unbound", "ts-devzero", signer, nil, nil)
	fifo := recordertest.Unfinalized(t, root, "_unbound", "ts-fifo", signer, nil, nil)
	replace := func(dir string, with func(path string) error) {
		path := filepath.Join(dir, "pty", vocab.TypescriptFile)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := with(path); err != nil {
			t.Fatal(err)
		}
	}
	replace(zero, func(p string) error { return os.Symlink("/dev/zero", p) })
	replace(fifo, func(p string) error { return syscall.Mkfifo(p, 0o600) })

	_, sshArgs, logs := startServe(t, bin, work, "--ready-file", filepath.Join(work, "ready"))
	port := ""
	for i, a := range sshArgs {
		if a == "-p" && i+1 < len(sshArgs) {
			port = sshArgs[i+1]
		}
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), 5*time.Second)
	if err != nil {
		t.Fatalf("the server printed its command but does not listen: %v", err)
	}
	c.Close()
	// Recovery runs in the background once the port is open.
	waitFor(t, 20*time.Second, "the background recovery to finish", func() bool {
		return strings.Contains(logs.String(), "recovery of unfinalized sessions finished")
	})
	for _, want := range []string{"ts-devzero", "ts-fifo"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("startup logs do not name the unrecoverable session %s:\n%s", want, logs.String())
		}
	}
	for dir, kind := range map[string]string{zero: "symbolic link", fifo: "named pipe"} {
		if _, err := os.Lstat(filepath.Join(dir, "pty", vocab.RecoveryFile)); err == nil {
			t.Errorf("%s: a recovery record was signed over a typescript that is a %s", dir, kind)
		}
		pub := writePubKey(t, signer.PublicKey())
		out, code := runCommand(t, bin, "verify", "--key", pub, dir)
		if code != 1 || !strings.Contains(string(out), kind) {
			t.Errorf("verify of a session whose typescript is a %s: exit %d, want 1 and an anomaly naming it:\n%s", kind, code, out)
		}
	}
}
