package recorder

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestStartNamedOnlyWhenPublished: a starting session's folder has no
// name in its run folder until publish, and then its starting name is gone.
func TestStartNamedOnlyWhenPublished(t *testing.T) {
	root := t.TempDir()
	d, err := makeSessionDirs(root, "run-p", "sess-p")
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	final := filepath.Join(root, "run-p", "sess-p")
	if _, err := os.Lstat(final); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("before publish the session folder is visible: %v", err)
	}
	if err := d.publish(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(final, ptyDirName)); err != nil || !fi.IsDir() {
		t.Fatalf("after publish the pty folder: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(root, vocab.SidecarDir, startingDir)); len(left) != 0 {
		t.Fatalf("after publish %d starting folders are left", len(left))
	}
}

// TestConcurrentStartsOfOneID: two starts of one id may both begin; the
// first to publish takes the id and the second is ErrSessionExists,
// leaving the first's record alone and nothing of its own.
func TestConcurrentStartsOfOneID(t *testing.T) {
	root := t.TempDir()
	a, err := makeSessionDirs(root, "run-c", "sess-c")
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := makeSessionDirs(root, "run-c", "sess-c")
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	f, err := a.createFile(vocab.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := a.publish(); err != nil {
		t.Fatal(err)
	}
	if err := b.publish(); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("the second publish of one id: %v, want ErrSessionExists", err)
	}
	if err := b.removeMade(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root, "run-c", "sess-c", ptyDirName, vocab.LogFile)); err != nil {
		t.Fatalf("the first start's record after the second was refused: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(root, vocab.SidecarDir, startingDir)); len(left) != 0 {
		t.Fatalf("the refused start left %d starting folders", len(left))
	}
	if _, err := makeSessionDirs(root, "run-c", "sess-c"); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("a start of a published id: %v, want ErrSessionExists", err)
	}
}

// TestSweepStartsRemovesCutStarts: a start a crash cut before publish
// (its folder, files and open record made, never named) is removed by
// the next start's sweep, and its id is free again: nothing of it
// crossed the terminal. A published session is not touched.
func TestSweepStartsRemovesCutStarts(t *testing.T) {
	root := t.TempDir()
	s := createSession(t, root, Meta{RunID: "run-s", SessionID: "kept"}, testOptions())
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		d, err := makeSessionDirs(root, "run-s", "cut")
		if err != nil {
			t.Fatal(err)
		}
		f, err := d.createFile(vocab.LogFile)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		d.close() // the crash: no publish, no cleanup
	}
	n, err := SweepStarts(root)
	if err != nil || n != 2 {
		t.Fatalf("SweepStarts = %d, %v; want 2 removed", n, err)
	}
	if left, _ := os.ReadDir(filepath.Join(root, vocab.SidecarDir, startingDir)); len(left) != 0 {
		t.Fatalf("%d starting folders left after the sweep", len(left))
	}
	if _, err := os.Lstat(filepath.Join(root, "run-s", "kept", ptyDirName, vocab.LogFile)); err != nil {
		t.Fatalf("the sweep touched a published session: %v", err)
	}
	again := createSession(t, root, Meta{RunID: "run-s", SessionID: "cut"}, testOptions())
	again.Close(0)
	if n, err := SweepStarts(t.TempDir()); n != 0 || err != nil {
		t.Fatalf("SweepStarts on a root without starts = %d, %v", n, err)
	}
}

// TestSessionDirsCloseEveryFolder: close releases each folder the
// session holds open, once; a second close has nothing left to release.
func TestSessionDirsCloseEveryFolder(t *testing.T) {
	d, err := makeSessionDirs(t.TempDir(), "run-d", "sess-d")
	if err != nil {
		t.Fatal(err)
	}
	held := []*os.File{d.pty, d.session, d.run}
	if err := d.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, f := range held {
		if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
			t.Errorf("folder %s after close: %v, want it closed", f.Name(), err)
		}
	}
	if err := d.close(); err != nil {
		t.Errorf("a second close = %v, want nothing to do", err)
	}
}
