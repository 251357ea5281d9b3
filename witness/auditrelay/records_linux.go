package auditrelay

import (
	"errors"
	"sync"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/auditnetlink"
	"github.com/aptl/aptl-kali-capture/internal/relaywire"
)

// serveRecords forwards the kernel's datagrams until the peer closes or
// stops reading. One goroutine drains the multicast socket into a queue
// bounded by bytes; this one sends. Anything dropped (the kernel's
// overrun, or the queue full) is counted and sent as an overrun frame
// before the next record, so the sidecar states it as a gap where it
// happened.
func serveRecords(c *relaywire.Conn, k kernelRecords) error {
	q := newQueue(queueBytes)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() { drain(k, q, stop) })
	// The sidecar sends nothing on this connection: a read that returns is
	// its close (or a frame it must not send), and ends the connection.
	peerGone := make(chan error, 1)
	wg.Go(func() {
		_, err := c.Read()
		peerGone <- err
		q.shut()
	})
	defer c.Unix().SetReadDeadline(time.Now()) // ends the read above on any return
	for {
		e, ok := q.take()
		if !ok {
			select {
			case err := <-peerGone:
				if err == nil {
					err = relaywire.ErrClosed
				}
				return err
			default:
				return errors.New("the kernel's records ended")
			}
		}
		deadline := time.Now().Add(writeWait)
		switch {
		case e.dropped > 0:
			if err := c.Write(relaywire.Encode(relaywire.TypeOverrun, uint32(min(e.dropped, 1<<32-1))), deadline); err != nil {
				return err
			}
			continue
		case !e.idle.IsZero():
			if err := c.Write(relaywire.Idle(e.idle), deadline); err != nil {
				return err
			}
			continue
		}
		frame, err := relaywire.EncodeBytes(relaywire.TypeRecord, e.datagram)
		if err != nil {
			q.drop(1) // longer than the protocol carries: counted, never cut
			continue
		}
		if err := c.Write(frame, deadline); err != nil {
			return err
		}
	}
}

// idleEvery is how often a busy relay looks, without waiting, whether the
// kernel's socket is empty, to say so (an idle frame); a quiet one says so
// after each readEvery without records.
const idleEvery = 100 * time.Millisecond

// drain reads the multicast socket into q until stop. Whenever it finds
// the socket empty it queues an idle entry: the sidecar dates a lost
// connection's window from the last one it received, since records read
// after it may have been in the queue when the connection ended.
func drain(k kernelRecords, q *queue, stop <-chan struct{}) {
	defer q.shut()
	buf := make([]byte, relaywire.MaxFrame)
	var lastIdle time.Time
	wait := readEvery
	for {
		select {
		case <-stop:
			return
		default:
		}
		b, err := k.Read(buf, wait)
		switch {
		case errors.Is(err, auditnetlink.ErrOverrun):
			q.drop(1)
		case err != nil:
			return
		case b != nil:
			q.put(append([]byte(nil), b...))
		default:
			lastIdle = time.Now()
			q.markIdle(lastIdle)
		}
		// Busy: the next read looks without waiting once idleEvery has
		// passed, so that an empty socket is noticed even when records
		// keep coming.
		wait = readEvery
		if b != nil && time.Since(lastIdle) >= idleEvery {
			wait = 0
		}
	}
}

// queue is a FIFO of datagrams bounded by bytes; what does not fit is
// counted where it was dropped: a drop entry in the order of the records,
// so the sidecar's gap falls between the records it fell between. Drops in
// a row share one entry, so entries are bounded by the datagrams.
type queue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []entry
	bytes  int
	limit  int
	closed bool
}

// entry is a datagram, a count of datagrams dropped, or an instant at
// which the kernel's socket was found empty.
type entry struct {
	datagram []byte
	dropped  uint64
	idle     time.Time
}

func newQueue(limit int) *queue {
	q := &queue{limit: limit}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) put(b []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bytes+len(b) > q.limit {
		q.dropLocked(1)
	} else {
		q.items = append(q.items, entry{datagram: b})
		q.bytes += len(b)
	}
	q.cond.Signal()
}

func (q *queue) drop(n uint64) {
	q.mu.Lock()
	q.dropLocked(n)
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *queue) dropLocked(n uint64) {
	if last := len(q.items) - 1; last >= 0 && q.items[last].dropped > 0 {
		q.items[last].dropped += n
		return
	}
	q.items = append(q.items, entry{dropped: n})
}

// markIdle queues an idle entry; one right behind another replaces it, so
// idle entries are bounded by the datagrams too.
func (q *queue) markIdle(at time.Time) {
	q.mu.Lock()
	if last := len(q.items) - 1; last >= 0 && !q.items[last].idle.IsZero() {
		q.items[last].idle = at
	} else {
		q.items = append(q.items, entry{idle: at})
	}
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *queue) shut() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// take waits for the next entry; ok is false once shut (what was queued
// is not sent: the connection is ending, and the sidecar's window starts
// before it, at the last idle entry sent).
func (q *queue) take() (e entry, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return entry{}, false
	}
	e = q.items[0]
	q.items[0] = entry{}
	q.items = q.items[1:]
	q.bytes -= len(e.datagram)
	return e, true
}
