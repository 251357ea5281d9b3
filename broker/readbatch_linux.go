package broker

import (
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// batchSize is the most one read of a session's output takes, and so the
// most one record write and one channel write carry. It matches the
// capacity the output pipes are given (growPipe), so one read empties a
// full pipe. Per batch the copier pays a record write, a timing line, a
// digest update and a delivery hand-off, and the runtime a few thread
// switches: at 64 KiB (a pipe's default capacity) those made bulk output
// cost about a third more CPU per byte than at 1 MiB. A busy stream holds
// two batches (one being read and recorded, one being delivered, see
// copyOutput), which is also the most a slow client can make the broker
// hold per stream; an idle one holds none (readBatch takes a batch only
// once the kernel has bytes). A PTY master fills a batch only under bulk
// output, since readBatch stops at the first read that finds nothing.
const batchSize = 1 << 20

// batches pools output batches across sessions, so idle sessions cost no
// buffer and busy ones do not allocate per read.
var batches = sync.Pool{New: func() any { b := make([]byte, batchSize); return &b }}

func getBatch() *[]byte  { return batches.Get().(*[]byte) }
func putBatch(b *[]byte) { batches.Put(b) }

// readBatch reads from f whatever the kernel has ready, up to batchSize,
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
func readBatch(f *os.File) (batch *[]byte, n int, waited bool, _ error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, 0, false, err
	}
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		if batch == nil {
			batch = getBatch()
		}
		buf := *batch
		for n < len(buf) {
			m, err := unix.Read(int(fd), buf[n:])
			switch {
			case m > 0:
				n += m
				continue
			case err == unix.EINTR:
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
