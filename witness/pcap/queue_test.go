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
	"github.com/google/gopacket/pcapgo"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// idleEngine is an engine with nothing attached to report.
type idleEngine struct{}

func (idleEngine) attach(*tap)          {}
func (idleEngine) detach(*tap)          {}
func (idleEngine) drops() uint64        { return 0 }
func (idleEngine) waitCaught(time.Time) {}

func testFiles(t *testing.T, dir string) *fileSet {
	return newFileSet(Limits{RotateBytes: 1 << 30, Files: DefaultFiles}, func(name string) (*os.File, error) {
		return os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	})
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
			if r.attrs[vocab.AttrBytes] != strconv.Itoa(excess*size) || r.attrs[vocab.AttrFirst] == "" {
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
	r, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		prefix, _, _ := bytes.Cut(data, []byte{0})
		out = append(out, string(prefix))
	}
}
