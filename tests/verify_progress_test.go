package tests

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// TestVerifyProgressOnlyOnATerminal verifies a session of 300 MiB (over
// the 256 MiB threshold): with stderr on a terminal (a pty) verify draws
// its progress line there; with stderr on a pipe, or with --json, it
// writes nothing to stderr. Slow (records 300 MiB): APTL_CAPTURE_SLOW_TESTS.
func TestVerifyProgressOnlyOnATerminal(t *testing.T) {
	if !slowTests {
		t.Skip("records 300 MiB; set APTL_CAPTURE_SLOW_TESTS=1")
	}
	bin := buildCommand(t)
	signer := newTestSigner(t)
	pub := writePubKey(t, signer.PublicKey())
	s, err := recorder.Create(t.TempDir(), recorder.Meta{RunID: "run-big", SessionID: "sess-big"}, recorder.Options{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range 300 {
		if err := s.Output(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}

	onTerminal := func(args ...string) (string, error) {
		master, slave, err := pty.Open()
		if err != nil {
			t.Skipf("no pty: %v", err)
		}
		defer master.Close()
		cmd := exec.Command(bin, args...)
		var stdout testutil.LockedBuffer
		cmd.Stdout, cmd.Stderr = &stdout, slave
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		slave.Close()
		var term bytes.Buffer
		done := make(chan struct{})
		go func() { io.Copy(&term, master); close(done) }()
		err = cmd.Wait()
		<-done
		return term.String(), err
	}
	term, err := onTerminal("verify", "--key", pub, s.Dir())
	if err != nil || !strings.Contains(term, "verify: ") || !strings.Contains(term, "MiB read") {
		t.Errorf("stderr on a terminal: %v, %q; want a progress line", err, term)
	}
	if term, err := onTerminal("verify", "--json", "--key", pub, s.Dir()); err != nil || term != "" {
		t.Errorf("--json, stderr on a terminal: %v, %q; want nothing", err, term)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "verify", "--key", pub, s.Dir())
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil || stderr.Len() != 0 || !bytes.HasPrefix(out, []byte("OK")) {
		t.Errorf("stderr on a pipe: %v, stderr %q, stdout %q", err, stderr.String(), out)
	}
}
