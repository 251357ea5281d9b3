package audit

import (
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/witness/witnessfs"
)

// switchGate is a recorder.WitnessGate whose answer the test sets.
type switchGate struct{ answer atomic.Int32 }

func (g *switchGate) Admit(int64) recorder.Storing { return recorder.Storing(g.answer.Load()) }
func (g *switchGate) set(s recorder.Storing)       { g.answer.Store(int32(s)) }

// TestAuditDiskLowWindowsAreGaps: events the gate refuses on a low volume
// are counted, not stored; a window that ended (an event stored again)
// is an audit-disk-low gap at the next checkpoint, one still open is one
// at the close, each with the first and last event's time and the count;
// events past a budget are an audit-budget gap naming it.
func TestAuditDiskLowWindowsAreGaps(t *testing.T) {
	e := newEngine(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.stop.Store(true)
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	gate := &switchGate{}
	w := &witness{eng: e, notify: func() {}, dir: dir, ses: unsetID,
		files: newFileSet(Limits{RotateBytes: 1 << 20, Files: 2}, func(name string) (*os.File, error) { return safefs.CreateIn(dir, name, 0o600) }, gate)}
	w.Start()
	t0 := time.Unix(1700000000, 0)
	n := 0
	put := func(k int) {
		for range k {
			text := "audit(1700000000.000:" + strconv.Itoa(100+n) + "): pid=1 uid=0"
			w.deliver(&Event{Serial: uint64(100 + n), Time: t0.Add(time.Duration(n) * time.Second), Records: []Record{{Type: 1300, Text: text}}})
			n++
		}
	}
	var gaps []map[string]string
	var fileRecords string
	emit := func(typ string, a map[string]string) error {
		switch typ {
		case vocab.TypeGap:
			if a[vocab.AttrReason] != vocab.GapAuditCatchUp { // the stopped engine's
				gaps = append(gaps, a)
			}
		case vocab.TypeAuditFile:
			fileRecords = a[vocab.AttrRecords]
		}
		return nil
	}
	put(1)
	gate.set(recorder.StoreDiskLow)
	put(2) // 1, 2
	gate.set(recorder.StoreOK)
	put(1)
	if _, err := w.Checkpoint(emit); err != nil {
		t.Fatal(err)
	}
	if len(gaps) != 1 {
		t.Fatalf("after the first window: %v", gaps)
	}
	gate.set(recorder.StoreDiskLow)
	put(3) // 4..6, open at the close
	gate.set(recorder.StoreRunBudget)
	put(1) // 7
	if _, err := w.Close(emit); err != nil {
		t.Fatal(err)
	}
	stamp := func(i int) string { return witnessfs.Stamp(t0.Add(time.Duration(i) * time.Second)) }
	want := []map[string]string{
		{vocab.AttrReason: vocab.GapAuditDiskLow, vocab.AttrStream: vocab.StreamAudit, vocab.AttrCount: "2", vocab.AttrFirst: stamp(1), vocab.AttrLast: stamp(2)},
		{vocab.AttrReason: vocab.GapAuditDiskLow, vocab.AttrStream: vocab.StreamAudit, vocab.AttrCount: "3", vocab.AttrFirst: stamp(4), vocab.AttrLast: stamp(6)},
		{vocab.AttrReason: vocab.GapAuditBudget, vocab.AttrStream: vocab.StreamAudit, vocab.AttrCount: "1", vocab.AttrFirst: stamp(7), vocab.AttrLast: stamp(7), vocab.AttrBudget: vocab.BudgetRun},
	}
	if len(gaps) != len(want) {
		t.Fatalf("gaps %v, want %v", gaps, want)
	}
	for i := range want {
		for k, v := range want[i] {
			if gaps[i][k] != v {
				t.Errorf("gap %d: %s = %q, want %q (%v)", i, k, gaps[i][k], v, gaps[i])
			}
		}
	}
	if fileRecords != "2" {
		t.Errorf("the audit file holds %s records, want the 2 stored", fileRecords)
	}
}
