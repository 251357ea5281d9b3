package safefs

import (
	"errors"
	"syscall"
)

// RetryEINTR calls fn until it returns an error other than EINTR (or
// none): a system call a signal interrupted is made again, as runc's
// retryOnEINTR does. The Go runtime installs its handlers with SA_RESTART,
// but some calls (openat on a FUSE or NFS file, fallocate, wait4, netlink
// sends) return EINTR even so.
func RetryEINTR(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// Interrupted reports whether err is EINTR, for the calls where an
// interruption is not retried at once but read as "nothing yet": a poll
// whose caller's loop checks a deadline or a stop flag before it polls
// again (a retry here would restart the timeout on every signal), or a
// connect whose time slice a loop already bounds. Every other call goes
// through RetryEINTR.
func Interrupted(err error) bool { return errors.Is(err, syscall.EINTR) }

// RetryEINTR2 is RetryEINTR for a call that also returns a value (a file
// descriptor, a byte count, a pid).
func RetryEINTR2[T any](fn func() (T, error)) (T, error) {
	for {
		v, err := fn()
		if !errors.Is(err, syscall.EINTR) {
			return v, err
		}
	}
}
