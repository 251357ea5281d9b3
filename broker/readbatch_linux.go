package broker

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"golang.org/x/sys/unix"
)

// Output is read into pooled batches of two sizes. smallBatch matches a
// pipe's capacity (64 KiB), so one read empties a full pipe; it is what
// every read takes first, and what an interactive session's prompts and
// echoes come in. A stream whose last read filled its batch is in bulk:
// its next read takes a largeBatch, which the copier fills while the
// command refills the pipe. Per batch the copier pays a record write, a
// timing line, a digest update and a delivery, and the runtime a few
// thread switches: at 64 KiB those made bulk output cost about a third
// more CPU per byte than at 1 MiB (BenchmarkBulkExecOutput).
//
// A busy stream holds two batches (one being read and recorded, one being
// delivered, see copyOutput), which is also the most a stalled client can
// make the broker hold per stream; an idle one holds none (readBatch takes
// a batch only once the kernel has bytes). Large batches out of the pool
// are bounded for the whole server (maxLargeBatches): past the bound a
// stream in bulk reads into small ones, so many stalled clients pin at most
// that many MiB, not 2 MiB a stream.
const (
	smallBatch      = 64 << 10
	largeBatch      = 1 << 20
	maxLargeBatches = 32
)

// The pools keep batches across sessions, so idle sessions cost no buffer
// and busy ones do not allocate per read. largeOut counts the large
// batches out of their pool.
var (
	smallBatches = sync.Pool{New: func() any { b := make([]byte, smallBatch); return &b }}
	largeBatches = sync.Pool{New: func() any { b := make([]byte, largeBatch); return &b }}
	largeOut     atomic.Int32
)

// getBatch returns a small batch, or a large one when large is asked for
// and fewer than maxLargeBatches are out.
func getBatch(large bool) *[]byte {
	if large {
		if largeOut.Add(1) <= maxLargeBatches {
			return largeBatches.Get().(*[]byte)
		}
		largeOut.Add(-1)
	}
	return smallBatches.Get().(*[]byte)
}

// putBatch returns b to the pool it came from.
func putBatch(b *[]byte) {
	if len(*b) == largeBatch {
		largeBatches.Put(b)
		largeOut.Add(-1)
		return
	}
	smallBatches.Put(b)
}

// readBatch reads from src whatever the kernel has ready, up to a batch,
// blocking (through the runtime poller, so deadlines apply) only until the
// first byte. A PTY master returns at most one tty buffer (about 4 KiB) per
// read; taking everything already queued in one call means one record write
// and one channel write per burst instead of per buffer, and never delays a
// byte that is already there. The batch comes from the pool once there is
// something to read and goes back there while readBatch waits; the caller
// owns it when n > 0 and returns it with putBatch.
//
// waited says that the stream was idle: nothing was queued when the read
// began, so the read waited for the first byte.
//
// large asks for a large batch (the stream is in bulk, see getBatch).
func readBatch(src syscall.Conn, large bool) (batch *[]byte, n int, waited bool, _ error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return nil, 0, false, err
	}
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		if batch == nil {
			batch = getBatch(large)
		}
		buf := *batch
		for n < len(buf) {
			m, err := safefs.RetryEINTR2(func() (int, error) { return unix.Read(int(fd), buf[n:]) })
			switch {
			case m > 0:
				n += m
				continue
			case err == unix.EAGAIN:
				if n == 0 {
					// Nothing yet: wait for readiness without a batch.
					putBatch(batch)
					batch = nil
					waited = true
					return false
				}
				return true
			case err != nil:
				rerr = os.NewSyscallError("read", err)
			default:
				rerr = io.EOF
			}
			return true
		}
		return true
	})
	if n > 0 {
		// Deliver what was read; the error (EIO, EOF) comes back on the
		// next call, when nothing is left.
		return batch, n, waited, nil
	}
	if batch != nil {
		putBatch(batch)
	}
	if rerr != nil {
		return nil, 0, waited, rerr
	}
	return nil, 0, waited, err
}
