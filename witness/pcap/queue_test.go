package pcap

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/aptl/aptl-kali-capture/internal/pcapng"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// idleEngine is an engine with nothing attached to report; each of its
// sessions has an engine's batches of its own.
type idleEngine struct{}

func (idleEngine) attach(*tap) error                        { return nil }
func (idleEngine) detach(*tap)                              {}
func (idleEngine) drops() uint64                            { return 0 }
func (idleEngine) waitCaught(t time.Time) (time.Time, bool) { return t, true }
func (idleEngine) budget() *batchBudget                     { return &batchBudget{limit: engineBatches} }

// sharedEngine is an idle engine whose sessions share its batches.
type sharedEngine struct {
	idleEngine
	batches *batchBudget
}

func (e sharedEngine) budget() *batchBudget { return e.batches }

func testFiles(t *testing.T, dir string) *fileSet {
	return newFileSet(Limits{RotateBytes: 1 << 30, Files: DefaultFiles}, func(name string) (*os.File, error) {
		return os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	}, nil)
}

type emitted struct {
	typ   string
	attrs map[string]string
}

// TestQueueFullBecomesAGap: a session whose writer is stuck never holds up
// the ring goroutine; past queueBatches outstanding batches its packets
// are counted, and at close they are a pcap-queue-full gap record, beside
// the file record of what was stored.
func TestQueueFullBecomesAGap(t *testing.T) {
	var notified atomic.Int32
	tp := newTap(idleEngine{}, testFiles(t, t.TempDir()), func() { notified.Add(1) })
	tp.Start()

	const size = 100 << 10 // five to a batch
	perBatch := batchBytes / size
	stored := queueBatches * perBatch
	const excess = 20
	data := make([]byte, size)
	p := packet{ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: data, length: size}

	// The writer cannot write: deliver must still return, every time.
	tp.filesMu.Lock()
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		for i := 0; i < stored+excess; i++ {
			p.ts = time.Now()
			tp.deliver(&p)
		}
		tp.handOff()
	}()
	select {
	case <-delivered:
	case <-time.After(10 * time.Second):
		t.Fatal("the ring goroutine blocked on a session whose writer is stuck")
	}
	tp.mu.Lock()
	full := tp.queueFull.packets
	tp.mu.Unlock()
	if full != excess {
		t.Errorf("%d packets counted as queue-full, want %d", full, excess)
	}
	tp.filesMu.Unlock()

	var records []emitted
	attrs, err := tp.Close(func(typ string, a map[string]string) error {
		records = append(records, emitted{typ, a})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var filePackets, gapCount string
	for _, r := range records {
		switch {
		case r.typ == vocab.TypePcapFile:
			filePackets = r.attrs[vocab.AttrPackets]
		case r.typ == vocab.TypeGap && r.attrs[vocab.AttrReason] == vocab.GapPcapQueueFull:
			gapCount = r.attrs[vocab.AttrCount]
			if r.attrs[vocab.AttrBytes] != strconv.Itoa(excess*size) || r.attrs[vocab.AttrFirst] == "" || r.attrs[vocab.AttrQueueLimit] != vocab.QueueLimitSession {
				t.Errorf("queue-full gap attrs = %v", r.attrs)
			}
		}
	}
	if filePackets != strconv.Itoa(stored) {
		t.Errorf("the file record says %q packets, want the %d queued", filePackets, stored)
	}
	if gapCount != strconv.Itoa(excess) {
		t.Errorf("pcap-queue-full gap count = %q, want %d (records %v)", gapCount, excess, records)
	}
	if attrs[vocab.AttrPcapPackets] != strconv.Itoa(stored+excess) {
		t.Errorf("close attrs count %s packets seen, want %d", attrs[vocab.AttrPcapPackets], stored+excess)
	}
	if notified.Load() == 0 {
		t.Error("the writer stored packets and asked for no checkpoint")
	}
}

// TestEngineBoundsEverySessionsBatches: sessions whose writers are stuck
// hold together at most engineBatches batches, however many there are.
// One session fills its own queue (its further packets: queue_limit
// session), six more share the rest of the engine's batches, and then
// they and a session opened late count their packets as queue_limit
// engine. Each session's stored and counted packets add up to what it saw,
// and every batch is given back once the writers have written.
func TestEngineBoundsEverySessionsBatches(t *testing.T) {
	const others = 6
	share := (engineBatches - queueBatches) / others
	if share*others != engineBatches-queueBatches || share >= queueBatches {
		t.Fatalf("queueBatches %d and engineBatches %d: pick another number of sessions sharing the engine", queueBatches, engineBatches)
	}
	budget := &batchBudget{limit: engineBatches}
	eng := sharedEngine{batches: budget}
	open := func() *tap {
		tp := newTap(eng, testFiles(t, t.TempDir()), func() {})
		tp.Start()
		tp.filesMu.Lock() // the writer cannot write
		return tp
	}

	const size = 100 << 10
	perBatch := batchBytes / size
	const excess = 7
	p := packet{ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, size), length: size}
	var taps []*tap
	deliver := func(tp *tap) {
		p.ts = time.Now()
		tp.deliver(&p)
		total := 0
		for _, o := range taps {
			o.mu.Lock()
			total += o.outstanding
			o.mu.Unlock()
		}
		if total > engineBatches || budget.n.Load() > engineBatches {
			t.Fatalf("%d batches outstanding (the engine counts %d), bound %d", total, budget.n.Load(), engineBatches)
		}
	}

	heavy := open()
	taps = append(taps, heavy)
	for i := 0; i < queueBatches*perBatch+excess; i++ {
		deliver(heavy)
	}
	var sharing []*tap
	for range others {
		sharing = append(sharing, open())
	}
	taps = append(taps, sharing...)
	for i := 0; i < share*perBatch+excess; i++ {
		for _, tp := range sharing {
			deliver(tp)
		}
		deliver(heavy)
	}
	late := open()
	taps = append(taps, late)
	for range excess {
		deliver(late)
	}
	if n := budget.n.Load(); n != engineBatches {
		t.Errorf("the engine counts %d batches outstanding, want all %d", n, engineBatches)
	}

	type want struct{ stored, session, engine int }
	wants := map[*tap]want{heavy: {queueBatches * perBatch, excess + share*perBatch + excess, 0}, late: {0, 0, excess}}
	for _, tp := range sharing {
		wants[tp] = want{share * perBatch, 0, excess}
	}
	for _, tp := range taps {
		tp.filesMu.Unlock()
	}
	for i, tp := range taps {
		var got want
		attrs, err := tp.Close(func(typ string, a map[string]string) error {
			switch {
			case typ == vocab.TypePcapFile:
				got.stored, _ = strconv.Atoi(a[vocab.AttrPackets])
			case typ == vocab.TypeGap && a[vocab.AttrReason] == vocab.GapPcapQueueFull:
				n, _ := strconv.Atoi(a[vocab.AttrCount])
				switch a[vocab.AttrQueueLimit] {
				case vocab.QueueLimitSession:
					got.session += n
				case vocab.QueueLimitEngine:
					got.engine += n
				default:
					t.Errorf("session %d: queue-full gap without a known limit: %v", i, a)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != wants[tp] {
			t.Errorf("session %d: stored, session-limited, engine-limited packets = %+v, want %+v", i, got, wants[tp])
		}
		if seen := strconv.Itoa(got.stored + got.session + got.engine); attrs[vocab.AttrPcapPackets] != seen {
			t.Errorf("session %d: close attrs count %s packets seen, stored and counted add up to %s", i, attrs[vocab.AttrPcapPackets], seen)
		}
	}
	if n := budget.n.Load(); n != 0 {
		t.Errorf("%d batches still counted against the engine after every session closed", n)
	}
}

// TestQueuedPacketsKeepTheirOrder: the writer writes batches in the order
// the ring delivered them, so the file's packets are in capture order.
func TestQueuedPacketsKeepTheirOrder(t *testing.T) {
	dir := t.TempDir()
	files := testFiles(t, dir)
	tp := newTap(idleEngine{}, files, func() {})
	tp.Start()
	const n = 3000
	for i := 0; i < n; i++ {
		data := []byte(strconv.Itoa(i))
		tp.deliver(&packet{ts: time.Now(), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: append(data, make([]byte, 400)...), length: 400 + len(data)})
		if i%100 == 99 {
			tp.handOff() // as after a ring block; skipped while the writer is behind
		}
	}
	if _, err := tp.Close(func(string, map[string]string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if files.Made() != 1 || files.Err() != nil {
		t.Fatalf("files made %d, err %v", files.Made(), files.Err())
	}
	got := packetPrefixes(t, filepath.Join(dir, FileName(1)))
	if len(got) != n {
		t.Fatalf("%d packets in the file, want %d", len(got), n)
	}
	for i, g := range got {
		if g != strconv.Itoa(i) {
			t.Fatalf("packet %d of the file is packet %s of the capture", i, g)
		}
	}
}

// packetPrefixes reads a pcapng file back and returns each packet's bytes
// up to its first zero byte.
func packetPrefixes(t *testing.T, path string) []string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapng.NewReader(f, SnapLen)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		p, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		prefix, _, _ := bytes.Cut(p.Data, []byte{0})
		out = append(out, string(prefix))
	}
}
