package recorder

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
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

// TestScheduleAtCheckpointBytes: in interval mode, the write that brings
// the unsigned bytes to exactly checkpointBytes is signed at once (the
// log's last record is a checkpoint over it, the only one since the
// open record but for the timer's), and the same write still starts its
// fsync beside the copier and arms the timer: a due checkpoint does not
// end the rest of the schedule.
func TestScheduleAtCheckpointBytes(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "schedule"})
	chunk := bytes.Repeat([]byte("c"), 64<<10)
	for n := len(chunk); n < checkpointBytes; n += len(chunk) {
		mustOK(t, s.Output(chunk))
	}
	// Each write below follows quiet, so what it starts is its own.
	quiet(t, s)
	mustOK(t, s.Output(chunk))

	s.mu.Lock()
	armed, syncing := s.tick != nil, s.syncing != nil
	s.mu.Unlock()
	if !armed {
		t.Error("the write that made a checkpoint due left the timer unarmed")
	}
	if !syncing {
		t.Error("the write that made a checkpoint due started no fsync (a whole syncBytes was unsynced)")
	}
	rs := logRecords(t, s.Dir())
	last := rs[len(rs)-1]
	if last.Type != vocab.TypeCheckpoint || last.Attrs[vocab.AttrTSSize] != readSize(t, s) {
		t.Fatalf("the log ends in %s %v, want a checkpoint over the typescript's %s bytes", last.Type, last.Attrs, readSize(t, s))
	}
	// Signed: the next write is not, until the schedule says so again.
	// (The log file may not hold its data record yet: records between
	// checkpoints are flushed on the schedule too.)
	quiet(t, s)
	mustOK(t, s.Output([]byte("after")))
	s.mu.Lock()
	unsigned := s.sinceCheckpoint
	s.mu.Unlock()
	if unsigned != int64(len("after")) {
		t.Errorf("%d bytes unsigned after the volume's checkpoint and one 5-byte write, want 5", unsigned)
	}
	// Nor does it start an fsync: 5 bytes are far below syncBytes.
	quiet(t, s)
	mustOK(t, s.Output([]byte("again")))
	if startedSync(s) != nil {
		t.Error("a 5-byte write started an fsync, far below syncBytes")
	}
	// The timer signs about once a second while the chunks are written
	// (more on a slow, loaded machine); a checkpoint per write would be
	// 256.
	if n := len(ofType(rs, vocab.TypeCheckpoint)); n > 64 {
		t.Errorf("%d checkpoints for %d writes below checkpointBytes, want the volume's one and the timer's", n, checkpointBytes/len(chunk))
	}
}

// quiet stops s's timer and collects the fsync running beside it, so
// that the timer and the fsync a test sees next are the next write's (the
// timer it arms fires a second later).
func quiet(t *testing.T, s *Session) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tick != nil {
		s.tick.Stop()
		s.tick = nil
	}
	mustOK(t, s.reapSync(true))
}

// readSize returns the size of s's typescript file, in decimal.
func readSize(t *testing.T, s *Session) string {
	t.Helper()
	fi, err := os.Stat(filepath.Join(s.Dir(), vocab.PTYDir, vocab.TypescriptFile))
	mustOK(t, err)
	return strconv.FormatInt(fi.Size(), 10)
}

// TestStrictSyncFailureIsTheWritesError: in strict mode a chunk is
// delivered only once it is durable, so the fsync's failure is the error
// of the write that recorded the chunk, not of a later one.
func TestStrictSyncFailureIsTheWritesError(t *testing.T) {
	opts := testOptions()
	opts.Sync = SyncStrict
	s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "strict-sync-fails"}, opts)
	// fsync(2) of a pipe fails with EINVAL; the timing line fits its
	// buffer, so only the fsync fails.
	pr, pw, err := os.Pipe()
	mustOK(t, err)
	t.Cleanup(func() { pr.Close() })
	s.mu.Lock()
	s.tm.File.Close()
	s.tm.File = pw
	s.mu.Unlock()
	leaves(s, evidence.StatusTampered) // its timing lines went to the pipe

	if err := s.Output([]byte("not durable")); err == nil || !strings.Contains(err.Error(), "fsync") {
		t.Fatalf("a strict write whose fsync failed = %v, want the fsync failure", err)
	}
	if err := s.Output([]byte("x")); err == nil || !strings.Contains(err.Error(), "fsync") {
		t.Errorf("the write after = %v, want the same failure, sticky", err)
	}
}
