package witnessfs

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestFileSetSyncGivesBackThePages: after Sync, and after Finish, a
// witness file's whole pages are out of the page cache
// (internal/writeback); the partial last page of the open file stays.
func TestFileSetSyncGivesBackThePages(t *testing.T) {
	s, dir := testFileSet(t, Limits{RotateBytes: 1 << 20, Files: 2}, 4096)
	testutil.SkipWhereFilesLiveInMemory(t, dir)
	packet := strings.Repeat("p", 1000) + "\n"
	for range 40 { // 40,040 bytes: with 4 KiB pages, nine whole and part of a tenth
		put(t, s, packet, time.Now())
	}
	s.Sync()
	pages := testutil.CachedPages(t, filepath.Join(dir, "f-1"))
	for i, in := range pages[:len(pages)-1] {
		if in {
			t.Errorf("page %d of the open file is still cached after Sync: %v", i, pages)
		}
	}
	if !pages[len(pages)-1] {
		t.Error("the open file's partial last page was dropped: the next bytes would read it back from disk")
	}
	for range 40 {
		put(t, s, packet, time.Now())
	}
	s.Finish()
	pages = testutil.CachedPages(t, filepath.Join(dir, "f-1"))
	for i, in := range pages[:len(pages)-1] {
		if in {
			t.Errorf("page %d of the finished file is still cached: %v", i, pages)
		}
	}
}
