package recorder

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestResizesCoalesceBeforeData: window changes faster than the token
// bucket become one resize record with the last size and a count, written
// before the bytes that follow them, and the record still verifies.
func TestResizesCoalesceBeforeData(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 11, 30, 16, 18, 11, 0, time.UTC)}
	s, err := create(t.TempDir(), Meta{RunID: "r", SessionID: "s", Term: "xterm", Rows: 24, Cols: 80}, testOptions(), clock.now)
	mustOK(t, err)
	const sent = resizeBurst + 100
	for i := range sent {
		mustOK(t, s.Resize(30, 81+i))
	}
	mustOK(t, s.Output([]byte("redrawn")))
	mustOK(t, s.Close(0))

	var resizes []integrity.Record
	dataSeen := false
	for _, line := range strings.Split(strings.TrimSpace(readRecord(t, s.Dir(), vocab.LogFile)), "\n") {
		var r integrity.Record
		mustOK(t, json.Unmarshal([]byte(line), &r))
		switch r.Type {
		case "resize":
			if dataSeen {
				t.Errorf("resize record %d after the data that followed it", r.Seq)
			}
			resizes = append(resizes, r)
		case vocab.TypeData:
			dataSeen = true
		}
	}
	if len(resizes) != resizeBurst+1 {
		t.Fatalf("%d resize records, want %d (the burst, then one coalesced)", len(resizes), resizeBurst+1)
	}
	last := resizes[len(resizes)-1].Attrs
	if last["count"] != strconv.Itoa(sent-resizeBurst) || last["cols"] != strconv.Itoa(80+sent) || last["rows"] != "30" {
		t.Errorf("coalesced resize = %v, want count %d and the last size 30x%d", last, sent-resizeBurst, 80+sent)
	}
	if n := strings.Count(readRecord(t, s.Dir(), "timing"), "SIGWINCH"); n != len(resizes) {
		t.Errorf("%d SIGWINCH timing entries for %d resize records", n, len(resizes))
	}
	if rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{}); !rep.OK() {
		t.Errorf("does not verify: %v", rep.Anomalies)
	}
}

// TestControlRecordsBounded: past MaxControlRecords control events are
// only counted, and Close states them in one events-dropped record.
func TestControlRecordsBounded(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "s", Term: "xterm", Rows: 24, Cols: 80})
	signal := map[string]string{"request": "signal", "name": "INT", "accepted": "true"}
	for range MaxControlRecords + 10 {
		mustOK(t, s.Control("request", signal))
	}
	mustOK(t, s.Control("request", map[string]string{"request": "x11-req", "accepted": "false"}))
	mustOK(t, s.Resize(40, 120))
	mustOK(t, s.Close(0))
	log := readRecord(t, s.Dir(), vocab.LogFile)
	if n := strings.Count(log, `"type":"request"`); n != MaxControlRecords {
		t.Errorf("%d request records, want %d", n, MaxControlRecords)
	}
	want := map[string]string{"reason": vocab.ReasonControlLimit, "count": "12", "signal": "10", "request": "1", "resize": "1", "rows": "40", "cols": "120"}
	for _, line := range strings.Split(log, "\n") {
		var r integrity.Record
		if json.Unmarshal([]byte(line), &r) != nil || r.Type != vocab.TypeEventsDropped {
			continue
		}
		for k, v := range want {
			if r.Attrs[k] != v {
				t.Errorf("events-dropped %s = %q, want %q", k, r.Attrs[k], v)
			}
		}
		return
	}
	t.Error("no events-dropped record")
}

// logOfType returns the records of type typ in s's log so far.
func logOfType(t *testing.T, s *Session, typ string) []integrity.Record {
	t.Helper()
	var rs []integrity.Record
	for _, line := range strings.Split(strings.TrimSpace(readRecord(t, s.Dir(), vocab.LogFile)), "\n") {
		var r integrity.Record
		mustOK(t, json.Unmarshal([]byte(line), &r))
		if r.Type == typ {
			rs = append(rs, r)
		}
	}
	return rs
}

// TestResizeBucketRefillsAtItsRate: after the burst, a second gives
// resizeRate more resize records at once, each a single window change
// with no count; the change past them waits to be coalesced.
func TestResizeBucketRefillsAtItsRate(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)}
	s, err := create(t.TempDir(), Meta{RunID: "r", SessionID: "s", Term: "xterm", Rows: 24, Cols: 80}, testOptions(), clock.now)
	mustOK(t, err)
	defer s.Close(0)
	for i := range resizeBurst {
		mustOK(t, s.Resize(30, 81+i))
	}
	clock.advance(time.Second)
	for i := range int(resizeRate) + 1 {
		mustOK(t, s.Resize(40, 100+i))
	}
	rs := logOfType(t, s, vocab.TypeResize)
	if want := resizeBurst + int(resizeRate); len(rs) != want {
		t.Fatalf("%d resize records a second after the burst, want %d (the burst, then %v a second)", len(rs), want, resizeRate)
	}
	for _, r := range rs {
		if c, ok := r.Attrs[vocab.AttrCount]; ok {
			t.Errorf("resize record %d stands for one window change but says count %s", r.Seq, c)
		}
	}
	if last := rs[len(rs)-1].Attrs; last[vocab.AttrRows] != "40" || last[vocab.AttrCols] != strconv.Itoa(100+int(resizeRate)-1) {
		t.Errorf("the last resize record before the coalescing = %v", last)
	}
}

// TestResizesCountTowardTheControlBound: resize records use the same
// MaxControlRecords as requests, so a window change and a full bound of
// requests leave one request counted, not recorded, and the
// events-dropped record names no window size when none was dropped.
func TestResizesCountTowardTheControlBound(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "s", Term: "xterm", Rows: 24, Cols: 80})
	mustOK(t, s.Resize(30, 100))
	for range MaxControlRecords {
		mustOK(t, s.Control("request", map[string]string{vocab.AttrRequest: "env", vocab.AttrAccepted: "false"}))
	}
	mustOK(t, s.Close(0))
	if n := len(logOfType(t, s, "request")); n != MaxControlRecords-1 {
		t.Errorf("%d request records after one resize record, want %d", n, MaxControlRecords-1)
	}
	dropped := logOfType(t, s, vocab.TypeEventsDropped)
	if len(dropped) != 1 {
		t.Fatalf("%d events-dropped records, want 1", len(dropped))
	}
	a := dropped[0].Attrs
	if a[vocab.AttrCount] != "1" || a[vocab.AttrRequest] != "1" || a[vocab.AttrResize] != "0" {
		t.Errorf("events-dropped = %v, want one request dropped and no resize", a)
	}
	if _, ok := a[vocab.AttrRows]; ok {
		t.Errorf("events-dropped names a window size (%v) though no window change was dropped", a)
	}
}
