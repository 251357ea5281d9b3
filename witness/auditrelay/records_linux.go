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
		datagram, dropped, ok := q.take()
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
		if dropped > 0 {
			if err := c.Write(relaywire.Encode(relaywire.TypeOverrun, uint32(min(dropped, 1<<32-1))), deadline); err != nil {
				return err
			}
		}
		if datagram == nil {
			continue
		}
		frame, err := relaywire.EncodeBytes(relaywire.TypeRecord, datagram)
		if err != nil {
			q.drop(1) // longer than the protocol carries: counted, never cut
			continue
		}
		if err := c.Write(frame, deadline); err != nil {
			return err
		}
	}
}

// drain reads the multicast socket into q until stop.
func drain(k kernelRecords, q *queue, stop <-chan struct{}) {
	defer q.shut()
	buf := make([]byte, relaywire.MaxFrame)
	for {
		select {
		case <-stop:
			return
		default:
		}
		b, err := k.Read(buf, readEvery)
		switch {
		case errors.Is(err, auditnetlink.ErrOverrun):
			q.drop(1)
		case err != nil:
			return
		case b != nil:
			q.put(append([]byte(nil), b...))
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

// entry is a datagram, or (nil datagram) a count of datagrams dropped.
type entry struct {
	datagram []byte
	dropped  uint64
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
	if last := len(q.items) - 1; last >= 0 && q.items[last].datagram == nil {
		q.items[last].dropped += n
		return
	}
	q.items = append(q.items, entry{dropped: n})
}

func (q *queue) shut() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// take waits for the next entry: a datagram, or a count of datagrams
// dropped; ok is false once shut (what was queued is not sent: the
// connection is ending).
func (q *queue) take() (datagram []byte, dropped uint64, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return nil, 0, false
	}
	e := q.items[0]
	q.items[0] = entry{}
	q.items = q.items[1:]
	q.bytes -= len(e.datagram)
	return e.datagram, e.dropped, true
}
