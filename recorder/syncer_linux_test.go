package recorder

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/internal/writeback"
)

// uncachedBelow fails the test if a page of path's first n bytes is still
// in the page cache, or if its last page is not.
func uncachedBelow(t *testing.T, path string, n int) {
	t.Helper()
	pages := testutil.CachedPages(t, path)
	below := n / os.Getpagesize()
	for i, in := range pages[:below] {
		if in {
			t.Errorf("%s: page %d of %d is still cached after the fsync", filepath.Base(path), i, below)
			break
		}
	}
	if !pages[len(pages)-1] {
		t.Errorf("%s: the last page was dropped: the next bytes would read it back from disk", filepath.Base(path))
	}
}

// TestIntervalSyncGivesBackTheRecordsPages: the fsync that the copier
// starts beside itself at syncBytes gives back the typescript's pages
// (internal/writeback).
func TestIntervalSyncGivesBackTheRecordsPages(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "bg-sync-pages"})
	testutil.SkipWhereFilesLiveInMemory(t, s.Dir())
	// Exactly syncBytes: the chunk that reaches it starts the fsync, and
	// nothing is written after it (a later chunk could land before or
	// after the fsync's reading of the size).
	chunk := bytes.Repeat([]byte("s"), 64<<10)
	for n := 0; n < syncBytes; n += len(chunk) {
		mustOK(t, s.Output(chunk))
	}
	ps := startedSync(s)
	if ps == nil {
		t.Fatal("no fsync started at syncBytes")
	}
	if <-ps.done; ps.err != nil {
		t.Fatal(ps.err)
	}
	uncachedBelow(t, filepath.Join(s.Dir(), "pty", vocab.TypescriptFile), writeback.Step)
	mustOK(t, s.Close(0))
}

// TestSyncFilesGivesBackEachFilesPages: all the files an fsync covers
// (typescript, timing and log) give their pages back.
func TestSyncFilesGivesBackEachFilesPages(t *testing.T) {
	dir := t.TempDir()
	testutil.SkipWhereFilesLiveInMemory(t, dir)
	var files []*os.File
	for _, name := range []string{vocab.TypescriptFile, vocab.TimingFile, vocab.LogFile} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(bytes.Repeat([]byte("r"), writeback.Step+10)); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	mustOK(t, syncFiles(files))
	for _, f := range files {
		uncachedBelow(t, f.Name(), writeback.Step)
	}
}
