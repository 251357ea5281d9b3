package pcap

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/witness/witnessfs"
)

// switchGate is a recorder.WitnessGate whose answer the test sets.
type switchGate struct{ answer atomic.Int32 }

func (g *switchGate) Admit(int64) recorder.Storing { return recorder.Storing(g.answer.Load()) }
func (g *switchGate) set(s recorder.Storing)       { g.answer.Store(int32(s)) }

// TestDiskLowWindowsAreGaps: packets the gate refuses on a low volume
// are counted, not stored; each window ends when a packet is stored
// again and becomes a pcap-disk-low gap record at the next checkpoint
// (first and last of the packets not stored, count, bytes), and a window
// still open at the close becomes one then. Packets past a budget are a
// pcap-budget gap naming the budget. The file record counts only the
// packets stored.
func TestDiskLowWindowsAreGaps(t *testing.T) {
	gate := &switchGate{}
	files := testFiles(t, t.TempDir())
	files.Gate = gate
	tp := newTap(idleEngine{}, files, func() {})
	tp.Start()
	t0 := time.Unix(1700000000, 0)
	n := 0
	put := func(k int) {
		for range k {
			files.write(&packet{ts: t0.Add(time.Duration(n) * time.Second), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 100), length: 100})
			n++
		}
	}
	var gaps []map[string]string
	var fileRecs []map[string]string
	emit := func(typ string, a map[string]string) error {
		switch typ {
		case vocab.TypeGap:
			gaps = append(gaps, a)
		case vocab.TypePcapFile:
			fileRecs = append(fileRecs, a)
		}
		return nil
	}
	put(2) // stored: 0, 1
	gate.set(recorder.StoreDiskLow)
	put(3) // not stored: 2..4
	gate.set(recorder.StoreOK)
	put(1) // stored: 5; the window 2..4 ends
	if _, err := tp.Checkpoint(emit); err != nil {
		t.Fatal(err)
	}
	if len(gaps) != 1 {
		t.Fatalf("after the first window: gaps %v", gaps)
	}
	gate.set(recorder.StoreDiskLow)
	put(2) // not stored: 6, 7; open at the close
	gate.set(recorder.StoreVolumeBudget)
	put(4) // not stored: 8..11, past the volume's budget
	if _, err := tp.Close(emit); err != nil {
		t.Fatal(err)
	}
	stamp := func(i int) string { return witnessfs.Stamp(t0.Add(time.Duration(i) * time.Second)) }
	want := []map[string]string{
		{vocab.AttrReason: vocab.GapPcapDiskLow, vocab.AttrStream: vocab.StreamPcap, vocab.AttrCount: "3", vocab.AttrBytes: "300", vocab.AttrFirst: stamp(2), vocab.AttrLast: stamp(4)},
		{vocab.AttrReason: vocab.GapPcapDiskLow, vocab.AttrStream: vocab.StreamPcap, vocab.AttrCount: "2", vocab.AttrBytes: "200", vocab.AttrFirst: stamp(6), vocab.AttrLast: stamp(7)},
		{vocab.AttrReason: vocab.GapPcapBudget, vocab.AttrStream: vocab.StreamPcap, vocab.AttrCount: "4", vocab.AttrBytes: "400", vocab.AttrFirst: stamp(8), vocab.AttrLast: stamp(11), vocab.AttrBudget: vocab.BudgetVolume},
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
	if len(fileRecs) != 1 || fileRecs[0][vocab.AttrPackets] != strconv.Itoa(3) {
		t.Errorf("file records %v, want one of the 3 packets stored", fileRecs)
	}
}

// TestLowWindowsAreBounded: a volume flapping between two checkpoints
// holds at most maxLowWindows windows; every packet not stored is still
// counted in one.
func TestLowWindowsAreBounded(t *testing.T) {
	gate := &switchGate{}
	files := testFiles(t, t.TempDir())
	files.Gate = gate
	for i := range 100 {
		gate.set(recorder.StoreDiskLow)
		files.write(&packet{ts: time.Unix(int64(i), 0), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 10), length: 10})
		gate.set(recorder.StoreOK)
		files.write(&packet{ts: time.Unix(int64(i), 1), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 10), length: 10})
	}
	ws := files.takeLowWindows()
	var total int64
	for _, w := range ws {
		total += w.packets
	}
	if len(ws) != maxLowWindows || total != 100 {
		t.Errorf("%d windows holding %d packets, want %d holding 100", len(ws), total, maxLowWindows)
	}
	files.Finish()
}
