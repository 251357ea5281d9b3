package recorder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// recoverUnfinalized lists the sessions under root and recovers those that
// need it (RecoverSessions, as serve's startup does), returning the
// directories it recovered and the errors joined.
func recoverUnfinalized(root string, opts Options) ([]string, error) {
	outcomes, err := recoverAll(root, opts)
	errs := []error{err}
	var recovered []string
	for _, o := range outcomes {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("recorder: %s: %w", o.Dir, o.Err))
			continue
		}
		recovered = append(recovered, o.Dir)
	}
	return recovered, errors.Join(errs...)
}

// recoverAll recovers the sessions under root as a start does, and
// returns every outcome reported.
func recoverAll(root string, opts Options) ([]RecoveryOutcome, error) {
	sessions, err := ListSessions(root)
	var out []RecoveryOutcome
	RecoverSessions(context.Background(), sessions, opts, func(o RecoveryOutcome) { out = append(out, o) })
	return out, err
}

// crashedSession records a little, makes it durable and signed, then lets
// the files go without a close record, as a killed sidecar leaves them.
func crashedSession(t *testing.T, root string) string {
	t.Helper()
	s, err := Create(root, Meta{RunID: "run-t", SessionID: "sess-t"}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Output([]byte("hello\r\n")); err != nil {
		t.Fatal(err)
	}
	crash(t, s)
	return s.Dir()
}

// TestRecoveryFollowsNoSwappedPTYFolder swaps a crashed session's pty
// folder for a link to a folder outside the capture root after the
// recovery opened it (the test hook stands in for the race the reviewer
// won with a sparse file): the recovery must read and write the folder it
// opened, and create nothing through the link.
func TestRecoveryFollowsNoSwappedPTYFolder(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	dir := crashedSession(t, root)
	pty, moved := filepath.Join(dir, vocab.PTYDir), filepath.Join(dir, "pty.real")
	recoveryOpened = func(string) {
		if err := os.Rename(pty, moved); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(outside, pty); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { recoveryOpened = nil })

	recovered, err := recoverUnfinalized(root, testOptions())
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the recovery wrote %s through the swapped link, outside the capture root", entries[0].Name())
	}
	if err != nil || len(recovered) != 1 {
		t.Fatalf("recovered %v, err %v; want the session recovered from the folder it opened", recovered, err)
	}
	if _, err := os.Lstat(filepath.Join(moved, vocab.RecoveryFile)); err != nil {
		t.Errorf("no recovery file in the pty folder the recovery opened: %v", err)
	}
	// Put the folder back where it belongs: what the recovery wrote there
	// reads as the crash it was.
	mustOK(t, os.Remove(pty))
	mustOK(t, os.Rename(moved, pty))
	checkRecoveredCrash(t, dir)
}

// checkRecoveredCrash verifies a recovered crashed session: unfinalized,
// with the recovery's statement, and no failed check.
func checkRecoveredCrash(t *testing.T, dir string) {
	t.Helper()
	rep := evidence.Verify(dir, evidence.Keys{Trusted: trusted()}, evidence.Options{})
	stated := slices.ContainsFunc(rep.Anomalies, func(a evidence.Anomaly) bool { return a.Kind == evidence.KindRecovered })
	if rep.Status != evidence.StatusUnfinalized || !stated {
		t.Errorf("recovered session %s verifies %s, want unfinalized with the recovery statement: %v", dir, rep.Status, rep.Anomalies)
	}
}

// TestRecoveryLeavesALiveSessionAlone: a session another server on the
// same capture root is recording (its recorder holds the log's lock) has
// no close record yet, and is no crash: the recovery writes nothing into
// it.
func TestRecoveryLeavesALiveSessionAlone(t *testing.T) {
	root := t.TempDir()
	s := createSession(t, root, Meta{RunID: "run-t", SessionID: "sess-live"}, testOptions())
	if err := s.Output([]byte("hello\r\n")); err != nil {
		t.Fatal(err)
	}
	recovered, err := recoverUnfinalized(root, testOptions())
	if err != nil || len(recovered) != 0 {
		t.Fatalf("recovered %v (%v), want nothing", recovered, err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), vocab.PTYDir, vocab.RecoveryFile)); !os.IsNotExist(err) {
		t.Errorf("a recovery file was written into a live session (%v)", err)
	}
	// The same session cut (its files closed without a close record) is
	// recovered: the lock went with them.
	crashed := crashedSession(t, root)
	if recovered, err := recoverUnfinalized(root, testOptions()); err != nil || len(recovered) != 1 || recovered[0] != crashed {
		t.Errorf("recovered %v (%v), want %s", recovered, err, crashed)
	}
	checkRecoveredCrash(t, crashed)
}
