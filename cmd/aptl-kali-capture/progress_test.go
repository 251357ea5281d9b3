package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/creack/pty"
)

// TestProgressLine: no line below the threshold; above it, a line drawn
// with a carriage return and erase, redrawn at most every progressEvery,
// and erased at the end.
func TestProgressLine(t *testing.T) {
	var w bytes.Buffer
	if p := newProgress(&w, progressThreshold); p != nil {
		t.Fatal("a progress line for a total at the threshold")
	}
	p := newProgress(&w, 2*progressThreshold)
	if p == nil {
		t.Fatal("no progress line above the threshold")
	}
	p.add(progressThreshold)
	if got, want := w.String(), "\r\x1b[Kverify: 256 of 512 MiB read (50%)"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	p.add(1 << 20) // within progressEvery: not redrawn
	if bytes.Count(w.Bytes(), []byte("verify:")) != 1 {
		t.Errorf("redrawn at once: %q", w.String())
	}
	p.done()
	if !bytes.HasSuffix(w.Bytes(), []byte("\r\x1b[K")) {
		t.Errorf("not erased at the end: %q", w.String())
	}
}

// TestIsTerminal: the line is drawn only on a terminal: a pty is one, a
// pipe and a file are not.
func TestIsTerminal(t *testing.T) {
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer master.Close()
	defer slave.Close()
	if !isTerminal(slave) {
		t.Error("a pty slave is not a terminal")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(w) || isTerminal(f) {
		t.Error("a pipe or a file is taken for a terminal")
	}
}
