package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// TestControlEventFloodIsBounded sends 10,000 window changes and signals
// (alternating) to a running PTY session in strict sync mode. The
// integrity log must stay within the documented bound
// (recorder.MaxControlRecords control records, a checkpoint at most per
// record), and account for every event: recorded, coalesced into a resize
// record's count, or counted in one events-dropped record.
func TestControlEventFloodIsBounded(t *testing.T) {
	const flood = 10000
	h := newHarness(t, func(c *broker.Config) { c.Sync = recorder.SyncStrict })
	ch, _, err := h.dial(t).OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	pty := gossh.Marshal(struct {
		Term                      string
		Cols, Rows, Width, Height uint32
		Modes                     string
	}{"xterm", 80, 24, 0, 0, ""})
	env := gossh.Marshal(struct{ N, V string }{"APTL_SESSION_ID", "flood-1"})
	for _, req := range []struct {
		typ     string
		payload []byte
	}{{"pty-req", pty}, {"env", env}, {"exec", gossh.Marshal(struct{ C string }{"trap '' USR1; echo STARTED; sleep 60"})}} {
		if ok, err := ch.SendRequest(req.typ, true, req.payload); !ok || err != nil {
			t.Fatalf("%s: %v %v", req.typ, ok, err)
		}
	}
	var out bytes.Buffer
	readUntil(t, ch, &out, "STARTED", 10*time.Second)
	go func() { bufio.NewReader(ch).WriteTo(&bytes.Buffer{}) }()

	sentResizes, sentSignals := 0, 0
	for i := range flood {
		if i%2 == 0 {
			ch.SendRequest("window-change", false, windowChange(uint32(81+i%50), 30))
			sentResizes++
		} else {
			ch.SendRequest("signal", false, gossh.Marshal(struct{ S string }{"USR1"}))
			sentSignals++
		}
	}
	// Requests are served in order: the reply to this one means the
	// broker has handled the flood.
	if ok, err := ch.SendRequest("window-change", true, windowChange(123, 45)); !ok || err != nil {
		t.Fatalf("final window-change: %v %v", ok, err)
	}
	sentResizes++
	if ok, err := ch.SendRequest("signal", true, gossh.Marshal(struct{ S string }{"TERM"})); !ok || err != nil {
		t.Fatalf("TERM: %v %v", ok, err)
	}
	sentSignals++
	h.waitIdle(t)

	recs := readIntegrityLog(t, h.sessionDir("_unbound", "flood-1"))
	counts := map[string]int{}
	recordedResizes, recordedSignals := 0, 0
	var dropped *integrity.Record
	for i, r := range recs {
		counts[r.Type]++
		switch {
		case r.Type == "resize":
			recordedResizes += attrInt(t, r, "count", 1)
		case r.Type == "request" && r.Attrs["request"] == "signal":
			recordedSignals++
		case r.Type == vocab.TypeEventsDropped:
			dropped = &recs[i]
		}
	}
	control := counts["resize"] + counts["request"] - 3 // pty-req, env and exec came before the start
	if control > recorder.MaxControlRecords {
		t.Errorf("%d control records, want at most %d", control, recorder.MaxControlRecords)
	}
	if n := counts[vocab.TypeCheckpoint]; n > recorder.MaxControlRecords+16 {
		t.Errorf("%d checkpoints for a control flood, want at most %d", n, recorder.MaxControlRecords+16)
	}
	if len(recs) > 2*recorder.MaxControlRecords+16 {
		t.Errorf("the log has %d records, want at most %d", len(recs), 2*recorder.MaxControlRecords+16)
	}
	t.Logf("record types %v; resizes recorded %d (with counts); signals recorded %d", counts, recordedResizes, recordedSignals)
	if dropped == nil {
		t.Fatalf("no %s record states the excess; record types: %v", vocab.TypeEventsDropped, counts)
	}
	if dropped.Attrs["reason"] != vocab.ReasonControlLimit {
		t.Errorf("events-dropped reason = %q", dropped.Attrs["reason"])
	}
	droppedResizes, droppedSignals := attrInt(t, *dropped, "resize", 0), attrInt(t, *dropped, "signal", 0)
	if got := recordedResizes + droppedResizes; got != sentResizes {
		t.Errorf("window changes: %d recorded (with coalesced counts) + %d dropped, want %d sent", recordedResizes, droppedResizes, sentResizes)
	}
	if got := recordedSignals + droppedSignals; got != sentSignals {
		t.Errorf("signals: %d recorded + %d dropped, want %d sent", recordedSignals, droppedSignals, sentSignals)
	}
	if got := attrInt(t, *dropped, "count", 0); got != droppedResizes+droppedSignals+attrInt(t, *dropped, "request", 0) {
		t.Errorf("events-dropped count %d does not add up: %v", got, dropped.Attrs)
	}
	if droppedResizes > 0 && (dropped.Attrs["rows"] != "45" || dropped.Attrs["cols"] != "123") {
		t.Errorf("events-dropped does not carry the last window size the PTY got (45x123): %v", dropped.Attrs)
	}
}

func windowChange(cols, rows uint32) []byte {
	return gossh.Marshal(struct{ Cols, Rows, Width, Height uint32 }{cols, rows, 0, 0})
}

// readIntegrityLog parses a session's integrity log, one record per line.
func readIntegrityLog(t *testing.T, dir string) []integrity.Record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "pty", vocab.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	var recs []integrity.Record
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var r integrity.Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// attrInt reads a count attribute of r, def when it is absent.
func attrInt(t *testing.T, r integrity.Record, name string, def int) int {
	t.Helper()
	v, ok := r.Attrs[name]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("record %d: %s = %q is not a count", r.Seq, name, v)
	}
	return n
}
