package broker

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// readBatch reads from f whatever the kernel has ready, up to len(buf),
// blocking (through the runtime poller, so deadlines apply) only until the
// first byte. A PTY master returns at most one tty buffer (about 4 KiB) per
// read; taking everything already queued in one call means one record write
// and one channel write per burst instead of per buffer, and never delays a
// byte that is already there.
func readBatch(f *os.File, buf []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	n := 0
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for n < len(buf) {
			m, err := unix.Read(int(fd), buf[n:])
			switch {
			case m > 0:
				n += m
				continue
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				return n > 0 // false: wait for readiness, then call again
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
		return n, nil
	}
	if rerr != nil {
		return 0, rerr
	}
	return 0, err
}
