package writeback

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

var pageSize = os.Getpagesize()

// writtenFile makes a file on a file system that keeps written pages
// cached and drops clean ones when advised to, writes size bytes to it and
// checks they are all cached; otherwise it skips.
func writtenFile(t *testing.T, size int) (*os.File, []byte) {
	t.Helper()
	dir := t.TempDir()
	testutil.SkipWhereFilesLiveInMemory(t, dir)
	f, err := os.Create(filepath.Join(dir, "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	data := bytes.Repeat([]byte("a"), size)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	for i, in := range testutil.CachedPages(t, f.Name()) {
		if !in {
			t.Skipf("page %d of a file just written is not cached: this file system (%s) does not show what Sync gives back", i, dir)
		}
	}
	return f, data
}

// TestSyncGivesBackTheWholeStepsWrittenBeforeIt: two steps and a bit
// written, Sync drops the two steps and keeps the rest, the file's end.
func TestSyncGivesBackTheWholeStepsWrittenBeforeIt(t *testing.T) {
	f, data := writtenFile(t, 2*Step+100)
	if err := Sync(f); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	got := testutil.CachedPages(t, f.Name())
	dropped := 2 * Step / pageSize
	for i, in := range got[:dropped] {
		if in {
			t.Fatalf("page %d of the two whole steps is still cached after Sync", i)
		}
	}
	if !got[dropped] {
		t.Errorf("the partial last page was dropped: the next append would read it back from disk")
	}
	// What was dropped is on disk: an append continues the file, and the
	// file reads back whole.
	if _, err := f.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	back, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if want := append(data, "tail"...); !bytes.Equal(back, want) {
		t.Errorf("the file reads back %d bytes, not the %d written", len(back), len(want))
	}
}

// TestSyncKeepsAFileShorterThanAStep: nothing below a step is dropped.
func TestSyncKeepsAFileShorterThanAStep(t *testing.T) {
	f, _ := writtenFile(t, Step-1)
	if err := Sync(f); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	for i, in := range testutil.CachedPages(t, f.Name()) {
		if !in {
			t.Fatalf("page %d of a file shorter than a step was dropped", i)
		}
	}
}

func TestSyncReportsTheFsyncFailure(t *testing.T) {
	f, _ := writtenFile(t, 10)
	f.Close()
	if err := Sync(f); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Sync of a closed file = %v, want os.ErrClosed", err)
	}
}
