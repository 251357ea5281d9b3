package recorder

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestIntervalSyncGivesBackTheRecordsPages: the fsync beside the copier
// leaves the typescript's durable pages out of the page cache
// (internal/writeback), all but the one the next bytes go to.
func TestIntervalSyncGivesBackTheRecordsPages(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "bg-sync-pages"})
	testutil.SkipWhereFilesLiveInMemory(t, s.Dir())
	if ps := recordPastSyncBytes(t, s, bytes.Repeat([]byte("s"), 64<<10)); ps.err != nil {
		t.Fatal(ps.err)
	}
	pages := testutil.CachedPages(t, filepath.Join(s.Dir(), "pty", vocab.TypescriptFile))
	cached := 0
	for _, in := range pages[:len(pages)-1] {
		if in {
			cached++
		}
	}
	if cached > 0 {
		t.Errorf("%d of the typescript's %d whole pages are still cached after its fsync", cached, len(pages)-1)
	}
	if !pages[len(pages)-1] {
		t.Error("the typescript's partial last page was dropped: the next bytes would read it back from disk")
	}
	mustOK(t, s.Close(0))
}
