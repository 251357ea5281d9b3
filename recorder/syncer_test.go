package recorder

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// startedSync returns the fsync running beside the copier, if any.
func startedSync(s *Session) *pendingSync {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncing
}

// recordPastSyncBytes records chunks of chunk until the fsync that
// syncBytes start beside the copier has started, and waits for it. It
// writes nothing after that write: the next write collects the fsync's
// result, which a test of a failing fsync checks itself.
func recordPastSyncBytes(t *testing.T, s *Session, chunk []byte) *pendingSync {
	t.Helper()
	for n := 0; startedSync(s) == nil; n += len(chunk) {
		if n > syncBytes {
			t.Fatalf("no fsync started after %d bytes were recorded (syncBytes %d)", n, syncBytes)
		}
		mustOK(t, s.Output(chunk))
	}
	ps := startedSync(s)
	<-ps.done
	return ps
}

// TestIntervalSyncRunsBesideTheCopier: past syncBytes the recorder starts
// an fsync without waiting for it, after writing the pending data record,
// so what the fsync covers includes the bytes that triggered it.
func TestIntervalSyncRunsBesideTheCopier(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "bg-sync"})
	chunk := bytes.Repeat([]byte("s"), 64<<10)
	if ps := recordPastSyncBytes(t, s, chunk); ps.err != nil {
		t.Fatal(ps.err)
	}
	if log := readRecord(t, s.Dir(), vocab.LogFile); !strings.Contains(log, `"type":"data"`) {
		t.Error("the data record was not written before the fsync started")
	}
	mustOK(t, s.Output(chunk))
	mustOK(t, s.Close(0))
	if rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{}); !rep.OK() {
		t.Fatalf("record does not verify: %v", rep.Anomalies)
	}
}

// TestBackgroundSyncFailureIsSticky: an fsync that fails beside the copier
// fails the next write and Close, as one on the copier's path would.
func TestBackgroundSyncFailureIsSticky(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "bg-sync-fails"})
	// fsync(2) of a pipe fails with EINVAL; writes of timing lines to it
	// succeed while they fit its buffer.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	s.mu.Lock()
	s.tm.File.Close()
	s.tm.File = pw
	s.mu.Unlock()
	// The timing lines from here go to the pipe, not the file the chain
	// vouches for: the file reads as cut.
	leaves(s, evidence.StatusTampered)

	recordPastSyncBytes(t, s, bytes.Repeat([]byte("f"), 256<<10))
	if err := s.Output([]byte("after")); err == nil || !strings.Contains(err.Error(), "fsync") {
		t.Errorf("write after a failed fsync = %v, want the fsync failure", err)
	}
	if err := s.Close(0); err == nil || !strings.Contains(err.Error(), "fsync") {
		t.Errorf("Close after a failed fsync = %v, want the fsync failure", err)
	}
	if err := s.Output([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("write after Close = %v, want ErrClosed", err)
	}
}
