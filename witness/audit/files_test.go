package audit

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestSessionFilesRotate: a session's events go, one whole event a file,
// into audit-000001.log and on, in auditd's log format; past Limits.Files
// they are counted as rotated, events and records, and each file's record
// counts its records.
func TestSessionFilesRotate(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Unix(1700000000, 0)
	ev := func(i int) *Event {
		text := "audit(1700000000.000:" + strconv.Itoa(100+i) + "): pid=1 uid=0"
		return &Event{Serial: uint64(100 + i), Time: t0.Add(time.Duration(i) * time.Second),
			Records: []Record{{Type: 1300, Text: text}, {Type: 1307, Text: text}}}
	}
	size := int64(len(ev(0).AppendLog(nil)))
	s := newFileSet(Limits{RotateBytes: 2 * size, Files: 2}, func(name string) (*os.File, error) {
		return os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	}, nil)
	for i := range 5 {
		s.write(ev(i))
	}
	s.Finish()
	if s.Err() != nil || s.Made() != 2 || s.rotated != (counted{events: 1, records: 2}) || s.failed != (counted{}) {
		t.Fatalf("err %v, %d files, rotated %+v, failed %+v; want two files and one event rotated", s.Err(), s.Made(), s.rotated, s.failed)
	}
	recs := s.TakeFinished()
	for i, r := range recs {
		b, err := os.ReadFile(filepath.Join(dir, FileName(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		want := string(ev(2*i).AppendLog(nil)) + string(ev(2*i+1).AppendLog(nil))
		if string(b) != want {
			t.Errorf("%s holds %q, want %q", FileName(i+1), b, want)
		}
		if a := r.Attrs(); r.Name != FileName(i+1) || a[vocab.AttrRecords] != "4" || r.Size != int64(len(want)) || !r.Last.Equal(ev(2*i+1).Time) {
			t.Errorf("record %+v", r)
		}
	}
	if len(recs) != 2 {
		t.Errorf("%d file records, want 2", len(recs))
	}
}
