package pcap

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
)

// TestTwoFullPacketsShareABatch: a batch holds two packets of SnapLen
// (batchBytes' own promise), so the queue's bound of batches is a bound
// of bytes: the second fills the first batch exactly, no second batch
// is taken.
func TestTwoFullPacketsShareABatch(t *testing.T) {
	tp := newTap(idleEngine{}, testFiles(t, t.TempDir()), func() {})
	tp.Start()
	tp.filesMu.Lock() // the writer, were one started, could not give a batch back
	for range 2 {
		tp.deliver(&packet{ts: time.Now(), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, SnapLen), length: SnapLen})
	}
	tp.mu.Lock()
	outstanding, held := tp.outstanding, 0
	if tp.filling != nil {
		held = len(tp.filling.pkts)
	}
	tp.mu.Unlock()
	tp.filesMu.Unlock()
	if outstanding != 1 || held != 2 {
		t.Errorf("%d batches outstanding, %d packets in the one filling; want 1 holding both", outstanding, held)
	}
	if _, err := tp.Close(func(string, map[string]string) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestHandOffReachesTheWriter: after a ring block the engine hands the
// batch filling to the session's writer even when it holds one small
// packet, so quiet traffic reaches the files (and asks for a checkpoint)
// without waiting for more; once written, the batch is given back to the
// session's queue and to the engine.
func TestHandOffReachesTheWriter(t *testing.T) {
	dir := t.TempDir()
	notified := make(chan struct{}, 1)
	eng := sharedEngine{batches: &batchBudget{limit: engineBatches}}
	tp := newTap(eng, testFiles(t, dir), func() {
		select {
		case notified <- struct{}{}:
		default:
		}
	})
	tp.Start()
	tp.deliver(&packet{ts: time.Now(), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: []byte("quiet\x00"), length: 6})
	tp.handOff()
	tp.mu.Lock()
	handed := tp.filling == nil
	tp.mu.Unlock()
	if !handed {
		t.Fatal("after a block the batch filling was kept, not handed to the writer")
	}
	select {
	case <-notified:
	case <-time.After(10 * time.Second):
		t.Fatal("the packet handed off after a block did not reach the writer")
	}
	tp.mu.Lock()
	outstanding := tp.outstanding
	tp.mu.Unlock()
	if outstanding != 0 || eng.batches.n.Load() != 0 {
		t.Errorf("after the writer wrote: %d batches outstanding for the session, %d for the engine; want 0", outstanding, eng.batches.n.Load())
	}
	if _, err := tp.Close(func(string, map[string]string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := packetPrefixes(t, filepath.Join(dir, FileName(1))); len(got) != 1 || got[0] != "quiet" {
		t.Errorf("the file holds %q, want the one packet", got)
	}
}
