package witnessfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestFileSetFullVolumeClaimsOnlyStored: the volume fills while a buffered
// file holds items. The checkpoint before and the file's record after
// vouch only for bytes in the file, which ends at a whole item; the
// items the full volume lost are counted (Lost), not claimed.
func TestFileSetFullVolumeClaimsOnlyStored(t *testing.T) {
	vol := testutil.SmallVolume(t, "256k")
	s := &FileSet{Class: "probe", Name: func(n int) string { return fmt.Sprintf("f-%d", n) }, CountAttr: "items",
		Buffer: 16 << 10, Limits: Limits{RotateBytes: 1 << 30, Files: 1},
		Create: func(name string) (*os.File, error) {
			return os.OpenFile(filepath.Join(vol, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		}}
	item := []byte(strings.Repeat("y", 999) + "\n")
	t0 := time.Unix(1700000000, 0)
	taken := int64(0)
	for i := 0; ; i++ {
		f, _ := s.Next(int64(len(item)))
		if f == nil {
			break
		}
		if _, err := f.Write(item); err != nil {
			s.Fail(err)
			break
		}
		f.Stored(1, t0.Add(time.Duration(i)*time.Millisecond))
		taken++
		if i == 20 {
			name, size, sum := s.Sync()
			if got, gotSize := digest(t, filepath.Join(vol, name)); got != sum || gotSize != size {
				t.Fatalf("checkpoint claims %d bytes %s, the file holds %d %s", size, sum, gotSize, got)
			}
			testutil.Fill(t, vol)
		}
		if i > 1000 {
			t.Fatal("the full volume never failed a write")
		}
	}
	if s.Err() == nil || !errors.Is(s.Err(), syscall.ENOSPC) {
		t.Fatalf("storing ended with %v, want ENOSPC", s.Err())
	}
	s.Finish()
	recs := s.TakeFinished()
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	r := recs[0]
	sum, size := digest(t, filepath.Join(vol, r.Name))
	if r.Size != size || r.SHA256 != sum || size%int64(len(item)) != 0 || r.Count != size/int64(len(item)) {
		t.Fatalf("record %d bytes %d items %s; file %d bytes %s: want the record to be the file's, whole items", r.Size, r.Count, r.SHA256, size, sum)
	}
	if r.Count+s.Lost() != taken || s.Lost() == 0 || r.WriteFailure == "" {
		t.Fatalf("stored %d + lost %d, taken %d (write failure %q): every item taken is stored or lost", r.Count, s.Lost(), taken, r.WriteFailure)
	}
	if want := t0.Add(time.Duration(r.Count-1) * time.Millisecond); !r.Last.Equal(want) {
		t.Errorf("record's last item %v, want %v (the last one stored)", r.Last, want)
	}
}
