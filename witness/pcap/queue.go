package pcap

import (
	"sync"
	"sync/atomic"
)

// The session writer runs beside the ring. Writing pcap files (write
// system calls and the running SHA-256 of every byte) on the goroutine that
// walks the ring took about 75% of the engine's time at 1400-byte packets,
// and while it ran the ring filled and the kernel dropped packets for every
// session. Now the ring goroutine only copies a session's packets into
// batches and hands them over; each session has a writer goroutine
// (started with its first batch) that writes them to its files. The queue
// is bounded: when a session's writer has queueBatches batches outstanding,
// its further packets are counted, never waited for, and become a
// pcap-queue-full gap record at close. The ring never blocks on a session.
//
// The per-session bound alone let memory grow with the number of sessions
// (64 sessions behind at once: 1 GiB), and the operator sizes the
// sidecar's memory once, whatever the agents open. So the engine also
// bounds the batches outstanding across all its sessions (engineBatches):
// a session that cannot have a batch because the engine's are all out
// counts its packets the same way, in a gap record of its own that names
// the bound (queue_limit engine, or session for the session's own).

const (
	// batchBytes holds the packet bytes of one batch: at least two packets
	// of SnapLen, so any packet fits an empty batch.
	batchBytes = 2 * SnapLen
	// queueBatches bounds a session's outstanding batches (filling,
	// queued and being written): 16 MiB, half the ring, held only while
	// the session's writer is behind.
	queueBatches = 32
	// engineBatches bounds the batches outstanding across every session of
	// an engine: 64 MiB, twice the ring. A busy session's writer normally
	// has a few MiB outstanding (the benchmark measured 6-9 MiB a session
	// under heavy loopback traffic), so about eight such sessions share it
	// before any loses a packet, and four sessions whose writers stalled
	// entirely take it all only after each reached its own bound; from
	// then on every session, keeping up or not, counts the packets it
	// has no batch for until those writers give batches back: the price
	// of a memory figure that does not grow with the sessions. A fixed
	// figure, not a setting: the sidecar's memory limit has to cover it
	// whatever the number of sessions, and nothing here is per lab.
	engineBatches = 4 * queueBatches
)

// batchBudget counts an engine's outstanding batches against its bound.
// The ring goroutine takes, the sessions' writers give back.
type batchBudget struct {
	limit int64
	n     atomic.Int64
}

// take reserves a batch; false when limit are outstanding. It never
// waits: the ring goroutine calls it.
func (b *batchBudget) take() bool {
	for {
		n := b.n.Load()
		if n >= b.limit {
			return false
		}
		if b.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (b *batchBudget) give() { b.n.Add(-1) }

// batch is packets copied out of the ring, their data back to back in buf.
type batch struct {
	buf  []byte
	pkts []packet // data of each points into buf
}

// batches are pooled across sessions: an idle session holds none.
var batches = sync.Pool{New: func() any { return &batch{buf: make([]byte, 0, batchBytes)} }}

// fits reports whether a packet of n bytes can still be added.
func (b *batch) fits(n int) bool { return len(b.buf)+n <= cap(b.buf) }

// add copies p (its data valid only during the engine's call) into b.
func (b *batch) add(p *packet) {
	off := len(b.buf)
	b.buf = append(b.buf, p.data...)
	q := *p
	q.data = b.buf[off:len(b.buf):len(b.buf)]
	b.pkts = append(b.pkts, q)
}

func (b *batch) release() {
	clear(b.pkts) // drop the references into buf
	b.buf, b.pkts = b.buf[:0], b.pkts[:0]
	batches.Put(b)
}

// enqueue stores p for the writer, or counts it when the session's queue or
// the engine's batches are all out. Callers hold t.mu.
func (t *tap) enqueue(p *packet) {
	if t.filling != nil && !t.filling.fits(len(p.data)) {
		t.handOffLocked()
	}
	if t.filling == nil {
		if t.outstanding >= queueBatches {
			t.queueFull.add(p)
			return
		}
		if !t.budget.take() {
			t.engineFull.add(p)
			return
		}
		t.filling = batches.Get().(*batch)
		t.outstanding++
	}
	t.filling.add(p)
}

// handOff passes the batch being filled to the writer when the writer has
// nothing else queued. The engine calls it after each ring block, so
// packets reach the files within a block's timeout even when few arrive;
// while the writer is behind, the batch keeps filling instead, so the
// batches it is handed then are full ones and the queue's bound counts
// bytes, not blocks.
func (t *tap) handOff() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed && len(t.queue) == 0 {
		t.handOffLocked()
	}
}

// handOffLocked is handOff for callers holding t.mu. The send never
// blocks: the queue's capacity is queueBatches and at most that many
// batches are outstanding.
func (t *tap) handOffLocked() {
	b := t.filling
	if b == nil {
		return
	}
	t.filling = nil
	if t.queue == nil {
		t.queue, t.written = make(chan *batch, queueBatches), make(chan struct{})
		go t.writeQueued(t.queue)
	}
	t.queue <- b
}

// writeQueued is the session's writer: it writes each batch to the files,
// in the order the ring delivered them, then asks for a checkpoint.
func (t *tap) writeQueued(queue <-chan *batch) {
	defer close(t.written)
	for b := range queue {
		t.filesMu.Lock()
		for i := range b.pkts {
			t.files.write(&b.pkts[i])
		}
		t.filesMu.Unlock()
		b.release()
		t.mu.Lock()
		t.outstanding--
		t.mu.Unlock()
		t.budget.give()
		// Stored evidence gets a checkpoint; not under a lock of the
		// tap's: the recorder calls Checkpoint holding its own.
		if !t.notified.Swap(true) {
			go t.notify()
		}
	}
}

// drainQueue hands over the last batch, ends the writer and waits until it
// wrote everything queued. Callers hold t.mu, set closed, and release t.mu
// before waiting on the returned channel (nil when no writer ran).
func (t *tap) drainQueueLocked() <-chan struct{} {
	t.handOffLocked()
	if t.queue == nil {
		return nil
	}
	close(t.queue)
	t.queue = nil
	return t.written
}
