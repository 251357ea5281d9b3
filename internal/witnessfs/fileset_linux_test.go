package witnessfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/writeback"
)

// TestFileSetSyncGivesBackThePages: after Sync, and after Finish, a
// witness file's pages below its last step are out of the page cache
// (internal/writeback); the open file's last page stays.
func TestFileSetSyncGivesBackThePages(t *testing.T) {
	s, dir := testFileSet(t, Limits{RotateBytes: 4 * writeback.Step, Files: 1}, 4096)
	testutil.SkipWhereFilesLiveInMemory(t, dir)
	path := filepath.Join(dir, "f-1")
	packet := strings.Repeat("p", 999) + "\n"
	check := func(when string) {
		t.Helper()
		pages := testutil.CachedPages(t, path)
		for i, in := range pages[:writeback.Step/os.Getpagesize()] {
			if in {
				t.Fatalf("%s: page %d of the first step is still cached", when, i)
			}
		}
		if when == "Sync" && !pages[len(pages)-1] {
			t.Errorf("%s: the last page was dropped: the next bytes would read it back from disk", when)
		}
	}
	for range writeback.Step/len(packet) + 2 {
		put(t, s, packet, time.Now())
	}
	s.Sync()
	check("Sync")
	put(t, s, packet, time.Now())
	s.Finish()
	check("Finish")
}
