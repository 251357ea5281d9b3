//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package evidence

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockedByWriter tries a shared, non-blocking flock on f: it fails with
// EWOULDBLOCK only while another open file holds the exclusive lock the
// recorder takes. A lock it gets is released at once.
func lockedByWriter(f *os.File) bool {
	err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	if err == nil {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return false
	}
	return errors.Is(err, unix.EWOULDBLOCK)
}
