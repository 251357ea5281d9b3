package recorder

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// limitFileSize caps the size of every file this process writes at n
// bytes (RLIMIT_FSIZE) until the returned restore runs (at the latest
// when the test ends): a write that crosses it stores the bytes below n
// and returns how many (a short write), and the next fails with EFBIG, as
// a volume that fills part-way through a write does. Go ignores SIGXFSZ,
// so the failure is the write's error. The limit is the process's: every
// file it writes meets it, the go command's test log among them (which
// the testing package appends to as files are opened by name), so a test
// restores it as soon as the writes under test are done, and runs
// nothing under it but those writes.
func limitFileSize(t *testing.T, n int64) (restore func()) {
	t.Helper()
	var was syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
		t.Fatal(err)
	}
	if was.Cur < uint64(n) { // unlimited is the largest value
		t.Skipf("RLIMIT_FSIZE is already %d, below the %d bytes the test needs", was.Cur, n)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: uint64(n), Max: was.Max}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	restore = func() {
		once.Do(func() {
			if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
				t.Errorf("restore RLIMIT_FSIZE: %v", err)
			}
		})
	}
	t.Cleanup(restore)
	return restore
}

// TestTypescriptWriteFailsPartWay: the typescript takes the first 100
// bytes of a 1,000-byte write and refuses the rest. The 100 stored bytes
// are data the chain and the timing file account for, the 900 refused a
// write-failed gap with their digest; the failure is sticky, Close
// finalizes once there is room again, and the record
// verifies with exactly that gap: nothing the client was told was
// recorded is missing, and nothing missing is unstated.
func TestTypescriptWriteFailsPartWay(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "partway"})
	// A typescript far larger than the timing file and the log, so the
	// cap meets only the typescript.
	mustOK(t, s.Output(bytes.Repeat([]byte("a"), 64<<10)))
	s.mu.Lock()
	size := s.ts.size
	s.mu.Unlock()
	restore := limitFileSize(t, size+100)
	err := s.Output(bytes.Repeat([]byte("b"), 1000))
	again := s.Output([]byte("c"))
	restore()

	if !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("a write past the volume's room = %v, want EFBIG", err)
	}
	if _, out := s.Bytes(); out != 64<<10+100 {
		t.Errorf("Bytes() out = %d, want %d (the bytes stored before the failure)", out, 64<<10+100)
	}
	if !errors.Is(again, syscall.EFBIG) {
		t.Errorf("a write after the failure = %v, want the same failure", again)
	}
	// The volume has room again: the failure stays the session's, and
	// Close finalizes the record.
	if err := s.Close(1, Header{Name: vocab.HeaderCloseReason, Value: vocab.CloseDiskFull}); !errors.Is(err, syscall.EFBIG) {
		t.Errorf("Close = %v, want the recording's failure returned", err)
	}

	rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{})
	if rep.Status != evidence.StatusOK || !rep.Finalized {
		t.Fatalf("status %s finalized %v anomalies %v, want ok", rep.Status, rep.Finalized, rep.Anomalies)
	}
	// Out counts what crossed the master, Stored what reached the file.
	if rep.Bytes.Out != 64<<10+1000 || rep.Bytes.Stored != 64<<10+100 {
		t.Errorf("verified output %d bytes, %d stored; want %d, %d", rep.Bytes.Out, rep.Bytes.Stored, 64<<10+1000, 64<<10+100)
	}
	lost := slices.IndexFunc(rep.Gaps, func(g evidence.Gap) bool { return g.Reason == vocab.GapWriteFailed })
	if lost < 0 || rep.Gaps[lost].Len != 900 || rep.Gaps[lost].Stream != vocab.StreamOut {
		t.Errorf("gaps %+v, want the 900 bytes refused as a %s gap of the output", rep.Gaps, vocab.GapWriteFailed)
	}
}

// TestNamedWholeFileIsWholeOrAbsent: where no unnamed file can be linked
// in (createNamedIn), a record file is written under its name in one write:
// whole and durable, or, when the volume takes only part of it, removed
// again, the error naming the file; its name alone would make a
// statement.
func TestNamedWholeFileIsWholeOrAbsent(t *testing.T) {
	d, err := makeSessionDirs(t.TempDir(), "run-n", "sess-n")
	mustOK(t, err)
	defer d.close()
	mustOK(t, d.publish()) // named, so the test reads it by its path
	whole := bytes.Repeat([]byte("w"), 100)
	mustOK(t, d.createNamedIn(d.pty, wholeFile{"whole", whole}))
	if got, err := os.ReadFile(filepath.Join(d.path, vocab.PTYDir, "whole")); err != nil || !bytes.Equal(got, whole) {
		t.Fatalf("the whole file reads %d bytes (%v), want its 100", len(got), err)
	}

	restore := limitFileSize(t, 10)
	err = d.createNamedIn(d.pty, wholeFile{"short", whole})
	restore()
	if !errors.Is(err, syscall.EFBIG) || !strings.Contains(err.Error(), "short") {
		t.Fatalf("a file the volume took 10 bytes of = %v, want EFBIG naming it", err)
	}
	if strings.Contains(err.Error(), "remove the short file") {
		t.Errorf("the error %q reports a failed removal, but the file was removed", err)
	}
	if _, err := os.Lstat(filepath.Join(d.path, vocab.PTYDir, "short")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file not written whole is still there (%v)", err)
	}
}
