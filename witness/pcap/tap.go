package pcap

import (
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/witness/witnessfs"
)

// tap is one session's share of the engine: it stores the packets whose
// kernel timestamps fall in the session's window, from Start to Close,
// and implements recorder.Witness.
type tap struct {
	eng    engine
	notify func()
	// notified is set from the first packet after a checkpoint until the
	// next one, so a busy capture asks for at most one checkpoint a cycle.
	notified atomic.Bool

	mu          sync.Mutex // protects what follows; the engine and the recorder share the tap
	start, end  time.Time  // the window; end is zero while it is open
	started     bool
	closed      bool
	ifaces      map[int]*ifaceStats
	truncated   int64   // packets cut at SnapLen
	unsupported counted // packets of interfaces whose link type is not written
	dropsAt     uint64  // the engine's kernel drop count at Start
	// The queue to the session's writer (queue.go).
	filling     *batch        // packets not handed over yet
	budget      *batchBudget  // the engine's batches, shared by its sessions
	outstanding int           // batches filling, queued or being written
	queueFull   counted       // packets not stored: the session's queue was full
	engineFull  counted       // packets not stored: the engine's batches were all out
	queue       chan *batch   // nil until the first hand-off, and after Close
	written     chan struct{} // closed when the writer has written everything

	// filesMu protects files; the writer holds it while writing, the
	// recorder's checkpoint while syncing. Never held with mu.
	filesMu sync.Mutex
	files   *fileSet
}

// ifaceStats are a session's packets and bytes on one interface.
type ifaceStats struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	LinkType int    `json:"link_type"`
	Packets  int64  `json:"packets"`
	Bytes    int64  `json:"bytes"`
}

// engine is what a tap needs of the capture engine.
type engine interface {
	// attach starts delivering to t; an error says why it cannot, and
	// then t is not attached.
	attach(t *tap) error
	detach(t *tap)
	// drops returns the kernel's drop count so far, summed over the
	// engine's life.
	drops() uint64
	// waitCaught waits, within its bound, until every packet the kernel
	// timestamped before t has been delivered; it returns the instant
	// delivered up to, and whether that reached t.
	waitCaught(t time.Time) (time.Time, bool)
	// budget bounds the batches outstanding across its sessions (queue.go).
	budget() *batchBudget
}

func newTap(eng engine, files *fileSet, notify func()) *tap {
	return &tap{eng: eng, budget: eng.budget(), files: files, notify: notify, ifaces: map[int]*ifaceStats{}}
}

// Start attaches the tap to the engine and opens the window: after the
// attach, which turns capture on for the first session, so every packet
// of the window reaches the tap. When the engine cannot capture, the
// window stays shut and the open record says pcap unavailable and why.
func (t *tap) Start() map[string]string {
	drops := t.eng.drops()
	if err := t.eng.attach(t); err != nil {
		return map[string]string{vocab.AttrPcap: vocab.PcapUnavailable, vocab.AttrPcapReason: err.Error()}
	}
	// The window opens under mu, which deliver takes: a packet delivered
	// before was stamped before start.
	t.mu.Lock()
	t.start, t.started, t.dropsAt = time.Now(), true, drops
	t.mu.Unlock()
	return nil
}

// deliver queues p for the session's writer when it falls in the window.
// The engine calls it for every packet while the tap is attached, on the
// ring's goroutine: it copies, counts and never waits for the files.
func (t *tap) deliver(p *packet) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.started || t.closed || p.ts.Before(t.start) || (!t.end.IsZero() && p.ts.After(t.end)) {
		return
	}
	st := t.ifaces[p.ifindex]
	if st == nil {
		st = &ifaceStats{Index: p.ifindex, Name: p.ifname, LinkType: int(p.linkType)}
		t.ifaces[p.ifindex] = st
	}
	st.Packets++
	st.Bytes += int64(p.length)
	if p.linkType == layers.LinkTypeNull {
		t.unsupported.add(p)
		return
	}
	if len(p.data) < p.length {
		t.truncated++
	}
	t.enqueue(p)
}

// Checkpoint flushes and syncs the current file, emits the records of
// files finished since the last checkpoint, and returns the current
// file's name, size and running digest.
func (t *tap) Checkpoint(emit recorder.Emit) (map[string]string, error) {
	t.notified.Store(false)
	t.filesMu.Lock()
	defer t.filesMu.Unlock()
	if err := t.emitFinished(emit); err != nil {
		return nil, err
	}
	name, size, sum := t.files.Sync()
	if name == "" {
		return nil, nil
	}
	return map[string]string{vocab.AttrPcapFile: name, vocab.AttrPcapSize: strconv.FormatInt(size, 10), vocab.AttrPcapSHA256: sum}, nil
}

// emitFinished emits the records of the files finished and the gaps of
// the low windows ended since the last call. Callers hold filesMu.
func (t *tap) emitFinished(emit recorder.Emit) error {
	for _, r := range t.files.TakeFinished() {
		if err := emit(vocab.TypePcapFile, r.Attrs()); err != nil {
			return err
		}
	}
	for _, w := range t.files.takeLowWindows() {
		if err := emit(vocab.TypeGap, w.gapAttrs(vocab.GapPcapDiskLow)); err != nil {
			return err
		}
	}
	return nil
}

// Close ends the window at now, waits until the engine has delivered what
// the kernel saw before it, detaches, finishes the last file and emits its
// record and the session's pcap gaps; it returns the close record's totals.
// A tap whose window never opened (Start was not called, or the engine
// could not capture) has nothing to close.
func (t *tap) Close(emit recorder.Emit) (map[string]string, error) {
	end := time.Now()
	t.mu.Lock()
	if !t.started {
		t.mu.Unlock()
		return nil, nil
	}
	t.end = end
	t.mu.Unlock()
	caughtAt, caught := t.eng.waitCaught(end)
	t.eng.detach(t)
	drops := t.eng.drops()
	// The ring goroutine may still be in a block it started before the
	// detach: closed makes it store nothing more.
	t.mu.Lock()
	t.closed = true
	written := t.drainQueueLocked()
	t.mu.Unlock()
	if written != nil {
		<-written
	}
	// The writer has ended; nothing else touches the tap now.
	t.mu.Lock()
	defer t.mu.Unlock()
	t.filesMu.Lock()
	defer t.filesMu.Unlock()
	t.files.Finish()
	t.files.gapAccounts()
	t.files.endLowWindow()
	if err := t.emitFinished(emit); err != nil {
		return nil, err
	}
	dropped := drops - t.dropsAt
	for _, g := range []struct {
		c      *counted
		reason string
		limit  string // which queue bound, for GapPcapQueueFull
		budget string // which budget, for GapPcapBudget
	}{
		{&t.files.rotated, vocab.GapPcapRotation, "", ""}, {&t.files.failed, vocab.GapPcapWriteFailed, "", ""}, {&t.unsupported, vocab.GapPcapLinkType, "", ""},
		{&t.queueFull, vocab.GapPcapQueueFull, vocab.QueueLimitSession, ""}, {&t.engineFull, vocab.GapPcapQueueFull, vocab.QueueLimitEngine, ""},
		{&t.files.runBudget, vocab.GapPcapBudget, "", vocab.BudgetRun}, {&t.files.volumeBudget, vocab.GapPcapBudget, "", vocab.BudgetVolume},
	} {
		if g.c.packets > 0 {
			a := g.c.gapAttrs(g.reason)
			if g.limit != "" {
				a[vocab.AttrQueueLimit] = g.limit
			}
			if g.budget != "" {
				a[vocab.AttrBudget] = g.budget
			}
			if err := emit(vocab.TypeGap, a); err != nil {
				return nil, err
			}
		}
	}
	if !caught {
		first := caughtAt
		if first.Before(t.start) {
			first = t.start
		}
		a := map[string]string{vocab.AttrReason: vocab.GapPcapCatchUp, vocab.AttrStream: vocab.StreamPcap,
			vocab.AttrFirst: witnessfs.Stamp(first), vocab.AttrLast: witnessfs.Stamp(end)}
		if err := emit(vocab.TypeGap, a); err != nil {
			return nil, err
		}
	}
	if dropped > 0 {
		// The kernel counts drops per socket: any drop in the window may
		// have been one of this session's packets.
		a := map[string]string{vocab.AttrReason: vocab.GapPcapKernelDrops, vocab.AttrStream: vocab.StreamPcap, vocab.AttrCount: strconv.FormatUint(dropped, 10)}
		if err := emit(vocab.TypeGap, a); err != nil {
			return nil, err
		}
	}
	return t.closeAttrs(dropped), nil
}

func (t *tap) closeAttrs(dropped uint64) map[string]string {
	var packets, bytes int64
	list := make([]*ifaceStats, 0, len(t.ifaces))
	for _, st := range t.ifaces {
		packets += st.Packets
		bytes += st.Bytes
		list = append(list, st)
	}
	slices.SortFunc(list, func(a, b *ifaceStats) int { return a.Index - b.Index })
	ifs, _ := json.Marshal(list)
	return map[string]string{
		vocab.AttrPcapPackets: strconv.FormatInt(packets, 10), vocab.AttrPcapBytes: strconv.FormatInt(bytes, 10),
		vocab.AttrPcapFiles: strconv.Itoa(t.files.Made()), vocab.AttrPcapKernelDrops: strconv.FormatUint(dropped, 10),
		vocab.AttrPcapInterfaces: string(ifs), vocab.AttrPcapTruncated: strconv.FormatInt(t.truncated, 10),
	}
}
