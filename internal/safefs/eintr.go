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
