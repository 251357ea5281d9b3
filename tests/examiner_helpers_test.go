package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// Helpers of the examiner's tests (verify, export, recovery): sessions
// written in-process, with or without a close, and the command run with a
// deadline so a hang fails the test instead of stalling it.

func newTestSigner(t *testing.T) gossh.Signer {
	t.Helper()
	return testutil.NewSigner()
}

// recordFinalized records a short finalized session with the real
// recorder under root/run/id and returns its directory.
func recordFinalized(t *testing.T, root, run, id string, signer gossh.Signer) string {
	t.Helper()
	s, err := recorder.Create(root, recorder.Meta{RunID: run, SessionID: id, Term: "xterm"}, recorder.Options{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Output([]byte("hello from the session\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Input([]byte("exit\r")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	return s.Dir()
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writePubKey writes key as a .pub file and returns its path.
func writePubKey(t *testing.T, key gossh.PublicKey) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "host.pub")
	writeFile(t, path, gossh.MarshalAuthorizedKey(key))
	return path
}

// runCommand runs the built binary with a deadline and returns its
// combined output and exit code; a run past the deadline fails the test.
func runCommand(t *testing.T, bin string, args ...string) ([]byte, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within the deadline; output:\n%s", filepath.Base(bin), args, out)
	}
	return out, exitCodeOf(err)
}
