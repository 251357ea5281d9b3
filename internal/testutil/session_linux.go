package testutil

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

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
