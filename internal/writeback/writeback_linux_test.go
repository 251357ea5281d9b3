package writeback

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// tempFileOnDisk makes a file in a folder whose file system drops clean
// pages when advised to, or skips.
func tempFileOnDisk(t *testing.T) *os.File {
	t.Helper()
	dir := t.TempDir()
	testutil.SkipWhereFilesLiveInMemory(t, dir)
	f, err := os.Create(filepath.Join(dir, "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestSyncDropsTheWholePagesWrittenBeforeIt(t *testing.T) {
	f := tempFileOnDisk(t)
	size := 5*pageSize + 100
	data := bytes.Repeat([]byte("aptl"), int(size)/4)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	for i, in := range testutil.CachedPages(t, f.Name()) {
		if !in {
			t.Fatalf("page %d of a file just written is not cached: this kernel cannot show what Sync drops", i)
		}
	}
	if err := Sync(f); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	got := testutil.CachedPages(t, f.Name())
	for i, in := range got[:5] {
		if in {
			t.Errorf("page %d is still cached after Sync: %v", i, got)
		}
	}
	if !got[5] {
		t.Errorf("the partial last page was dropped (the next append would read it back from disk): %v", got)
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

func TestSyncKeepsAFileShorterThanAPage(t *testing.T) {
	f := tempFileOnDisk(t)
	if _, err := f.Write([]byte("a timing line\n")); err != nil {
		t.Fatal(err)
	}
	if err := Sync(f); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if got := testutil.CachedPages(t, f.Name()); !got[0] {
		t.Error("the only page, partial, was dropped")
	}
}

func TestSyncReportsTheFsyncFailure(t *testing.T) {
	f := tempFileOnDisk(t)
	f.Close()
	if err := Sync(f); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Sync of a closed file = %v, want os.ErrClosed", err)
	}
}
