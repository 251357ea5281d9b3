package testutil

import (
	"bytes"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/launch"
)

// PipeSpec makes the three pipes of an exec session; it returns the spec
// (the child's ends) and the server's ends.
func PipeSpec(t testing.TB, user, command string) (spec launch.Spec, stdin, stdout, stderr *os.File) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inW.Close(); outR.Close(); errR.Close() })
	return launch.Spec{User: user, Command: command, Stdin: inR, Stdout: outW, Stderr: errW}, inW, outR, errR
}

// ReadAllAsync reads f to EOF; EOF arrives only once every write end is closed,
// which requires Launch to have closed the server's copy.
func ReadAllAsync(f *os.File) <-chan string {
	ch := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(f)
		ch <- string(b)
	}()
	return ch
}

// RecvString waits (bounded) for what ReadAllAsync read.
func RecvString(t testing.TB, what string, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(FailAfter):
		t.Fatalf("%s: no EOF (a write end is still open)", what)
		return ""
	}
}

// WaitExit calls Wait, failing the test if the process does not exit in time.
func WaitExit(t testing.TB, p launch.Process) launch.Exit {
	t.Helper()
	type result struct {
		e   launch.Exit
		err error
	}
	ch := make(chan result, 1)
	go func() {
		e, err := p.Wait()
		ch <- result{e, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Wait: %v", r.err)
		}
		return r.e
	case <-time.After(FailAfter):
		_ = p.Signal(syscall.SIGKILL)
		t.Fatal("process did not exit")
		return launch.Exit{}
	}
}

// TermOutput collects what the child writes to the PTY, read from the master
// by one goroutine that reports chunks and closes ch at EOF/EIO.
type TermOutput struct {
	ch  chan []byte
	buf bytes.Buffer // touched only by the test goroutine
}

// ReadMaster starts reading master into a TermOutput.
func ReadMaster(master *os.File) *TermOutput {
	o := &TermOutput{ch: make(chan []byte, 16)}
	go func() {
		defer close(o.ch)
		for {
			b := make([]byte, 4096)
			n, err := master.Read(b)
			if n > 0 {
				o.ch <- b[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	return o
}

// Expect reads until the output contains s.
func (o *TermOutput) Expect(t testing.TB, s string) {
	t.Helper()
	timeout := time.After(FailAfter)
	for !strings.Contains(o.buf.String(), s) {
		select {
		case b, ok := <-o.ch:
			if !ok {
				t.Fatalf("terminal closed before %q appeared; output: %q", s, o.buf.String())
			}
			o.buf.Write(b)
		case <-timeout:
			t.Fatalf("timed out waiting for %q; output: %q", s, o.buf.String())
		}
	}
}

// All reads until the slave side is closed by every holder (EIO on the master).
func (o *TermOutput) All(t testing.TB) string {
	t.Helper()
	timeout := time.After(FailAfter)
	for {
		select {
		case b, ok := <-o.ch:
			if !ok {
				return o.buf.String()
			}
			o.buf.Write(b)
		case <-timeout:
			t.Fatalf("terminal not closed; output so far: %q", o.buf.String())
		}
	}
}
