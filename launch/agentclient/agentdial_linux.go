package agentclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"golang.org/x/sys/unix"
)

// dialSlice bounds one blocking connect, so that a cancelled context is
// noticed within it.
const dialSlice = 50 * time.Millisecond

// dialAgentSocket connects to the agent with a blocking connect(2), retried
// in slices until ctx ends. Processes that flood the agent's socket keep
// its accept queue full, and a non-blocking connect (what net.Dial does)
// then fails at once with EAGAIN, however fast the agent refuses them; a
// blocking connect instead waits in the listener's queue of connectors,
// which the kernel wakes one at a time in order (unix_wait_for_peer), so
// the sidecar waits behind at most one connect per flooder.
func dialAgentSocket(ctx context.Context, socket string) (*net.UnixConn, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), socket)
	defer f.Close() // net.FileConn keeps a duplicate
	for {
		slice := dialSlice
		if d, ok := ctx.Deadline(); ok {
			slice = min(slice, time.Until(d))
		}
		if err := ctx.Err(); err != nil || slice <= 0 {
			return nil, fmt.Errorf("connect: %w", context.DeadlineExceeded)
		}
		// For a Unix socket, SO_SNDTIMEO bounds a blocking connect (unix(7)).
		tv := unix.NsecToTimeval(slice.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
			return nil, os.NewSyscallError("setsockopt SO_SNDTIMEO", err)
		}
		err := unix.Connect(fd, &unix.SockaddrUnix{Name: socket}) // "@name" is abstract
		if err == nil || errors.Is(err, unix.EISCONN) {
			break
		}
		// EAGAIN: the slice ended with the queue still full; EINTR: a signal
		// (the Go runtime's preemption) interrupted the wait. Both retry.
		if !errors.Is(err, unix.EAGAIN) && !safefs.Interrupted(err) {
			return nil, os.NewSyscallError("connect", err)
		}
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return c.(*net.UnixConn), nil
}
