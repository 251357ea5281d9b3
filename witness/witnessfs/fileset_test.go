package witnessfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testFileSet(t *testing.T, limits Limits, buffer int) (*FileSet, string) {
	dir := t.TempDir()
	return &FileSet{Class: "probe", Name: func(n int) string { return fmt.Sprintf("f-%d", n) }, CountAttr: "items", Buffer: buffer, Limits: limits,
		Create: func(name string) (*os.File, error) {
			return os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		}}, dir
}

// put stores item as a witness does; it reports false when the item was
// not stored, and whether because the files were all made.
func put(t *testing.T, s *FileSet, item string, at time.Time) (stored, full bool) {
	t.Helper()
	f, why := s.Next(int64(len(item)))
	if f == nil {
		return false, why == Full
	}
	if _, err := f.Write([]byte(item)); err != nil {
		t.Fatal(err)
	}
	f.Stored(1, at)
	return true, false
}

func digest(t *testing.T, path string) (string, int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), int64(len(b))
}

// TestFileSetRotates: a file takes items until the next would pass
// RotateBytes; past Files the items are refused as full; each finished
// file's record names its items, bytes, digest and times as they are on
// disk.
func TestFileSetRotates(t *testing.T) {
	s, dir := testFileSet(t, Limits{RotateBytes: 100, Files: 2}, 0)
	t0 := time.Unix(1700000000, 0)
	item := strings.Repeat("x", 39) + "\n"
	for i := range 4 {
		if stored, _ := put(t, s, item, t0.Add(time.Duration(i)*time.Second)); !stored {
			t.Fatalf("item %d not stored", i)
		}
	}
	if stored, full := put(t, s, item, t0.Add(9*time.Second)); stored || !full {
		t.Fatalf("past the last file: stored %v, full %v; want refused as full", stored, full)
	}
	s.Finish()
	recs := s.TakeFinished()
	if len(recs) != 2 || s.Made() != 2 || s.Err() != nil {
		t.Fatalf("%d records, %d made, err %v; want 2, 2, nil", len(recs), s.Made(), s.Err())
	}
	for i, r := range recs {
		sum, size := digest(t, filepath.Join(dir, r.Name))
		want := FileRecord{Name: fmt.Sprintf("f-%d", i+1), CountAttr: "items", Count: 2, Size: 80, SHA256: sum,
			First: t0.Add(time.Duration(2*i) * time.Second), Last: t0.Add(time.Duration(2*i+1) * time.Second)}
		if r != want || size != 80 {
			t.Errorf("record %+v (file %d bytes), want %+v", r, size, want)
		}
	}
	if len(s.TakeFinished()) != 0 {
		t.Error("records taken twice")
	}
}

// TestFileSetBigItemInEmptyFile: a file that holds nothing takes an item
// larger than RotateBytes rather than refuse it for ever.
func TestFileSetBigItemInEmptyFile(t *testing.T) {
	s, _ := testFileSet(t, Limits{RotateBytes: 10, Files: 3}, 0)
	big := strings.Repeat("y", 50)
	if f1, _ := s.Next(50); f1 == nil {
		t.Fatal("no first file")
	} else if f, _ := s.Next(50); f != f1 {
		t.Fatal("a file that holds nothing yet was rotated")
	}
	for i := range 2 {
		if stored, _ := put(t, s, big, time.Now()); !stored {
			t.Fatalf("item %d not stored", i)
		}
	}
	if s.Made() != 2 {
		t.Errorf("%d files made, want one an item", s.Made())
	}
}

// TestFileSetSyncFlushes: with a buffer, Sync writes it to the file and
// returns the name, size and digest of what the file then holds.
func TestFileSetSyncFlushes(t *testing.T) {
	s, dir := testFileSet(t, Limits{RotateBytes: 1 << 20, Files: 1}, 4096)
	if name, _, _ := s.Sync(); name != "" {
		t.Fatalf("Sync with no file open named %q", name)
	}
	put(t, s, "buffered\n", time.Now())
	if _, size := digest(t, filepath.Join(dir, "f-1")); size != 0 {
		t.Fatalf("%d bytes on disk before Sync, want them still buffered", size)
	}
	name, size, sum := s.Sync()
	wantSum, wantSize := digest(t, filepath.Join(dir, "f-1"))
	if name != "f-1" || size != wantSize || sum != wantSum || size != 9 {
		t.Errorf("Sync = %s %d %s; the file holds %d bytes, %s", name, size, sum, wantSize, wantSum)
	}
}

// TestFileSetFailures: a file that cannot be made ends storing, and the
// error names the class and the file; an error ends storing for good and
// is the finished file's write_error.
func TestFileSetFailures(t *testing.T) {
	s, _ := testFileSet(t, Limits{RotateBytes: 1 << 20, Files: 2}, 0)
	s.Create = func(string) (*os.File, error) { return nil, errors.New("no room") }
	if stored, full := put(t, s, "a\n", time.Now()); stored || full {
		t.Fatalf("create failed: stored %v, full %v; want refused, not full", stored, full)
	}
	if s.Err() == nil || s.Err().Error() != "probe: create f-1: no room" {
		t.Errorf("Err() = %v", s.Err())
	}

	s, _ = testFileSet(t, Limits{RotateBytes: 1 << 20, Files: 2}, 0)
	put(t, s, "a\n", time.Now())
	s.Fail(errors.New("probe: write f-1: disk gone"))
	if stored, full := put(t, s, "b\n", time.Now()); stored || full {
		t.Fatalf("after a failure: stored %v, full %v; want refused, not full", stored, full)
	}
	s.Finish()
	recs := s.TakeFinished()
	if len(recs) != 1 || recs[0].WriteFailure != "probe: write f-1: disk gone" || recs[0].Count != 1 {
		t.Fatalf("records %+v, want f-1 with one item and the write error", recs)
	}
	if a := recs[0].Attrs(); a["write_error"] != recs[0].WriteFailure || a["items"] != "1" {
		t.Errorf("attributes %v", a)
	}
}

// TestFileSetRotationAfterAFailedFlushOpensNothing: when finishing the
// full file fails (its held items cannot be written), storing has ended:
// Next refuses the item that asked for the rotation as failed, and no
// next file is created, which would be a file no record vouches for.
func TestFileSetRotationAfterAFailedFlushOpensNothing(t *testing.T) {
	s, dir := testFileSet(t, Limits{RotateBytes: 10, Files: 3}, 1<<10)
	create := s.Create
	s.Create = func(name string) (*os.File, error) {
		if name == "f-1" { // a file that takes no write
			return os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
		}
		return create(name)
	}
	if stored, _ := put(t, s, "12345678\n", time.Now()); !stored {
		t.Fatal("the first item was not taken (held in the buffer)")
	}
	if f, why := s.Next(9); f != nil || why != Failed {
		t.Fatalf("the rotation after a failed flush gave %v, %v; want no file, Failed", f, why)
	}
	if s.Err() == nil || s.Made() != 1 {
		t.Errorf("Err %v, %d files made; want the flush's error and only f-1", s.Err(), s.Made())
	}
	if _, err := os.Lstat(filepath.Join(dir, "f-2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("f-2 after the failure: %v, want none", err)
	}
}
