package broker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"golang.org/x/sys/unix"
)

// ptyMaster is a session's PTY master, kept out of the runtime poller.
//
// The runtime poller registers every descriptor for input and output
// readiness at once. A PTY master becomes writable again each time the shell
// reads from the slave (n_tty wakes the master's writers after every read
// that leaves the slave's input queue short), and bash's line editor reads
// its input one byte at a time: each byte of a typed command woke a thread of
// this server for nothing, about fifty a command, and on two cores that
// delayed the shell itself: the round trip of a command was a fifth slower
// with them than without (docs/BENCHMARKS.md, "The master's wake-ups").
// sshd polls the master for output readiness only while it holds input to
// write; so does this type.
//
// Reads wait on readable, an epoll set of its own that holds the master for
// input readiness (and hang-up) only. Writes that find the terminal's input
// queue full wait on writable, a second set that holds the master for
// output readiness only while such a write waits. Both sets are in the
// runtime poller (an epoll descriptor is readable when a member is ready),
// so deadlines, and Close waking a waiter, work as for any pollable file.
// Both are made with the master, so that running out of descriptors fails
// a session at its start, never a write part-way through it.
//
// The master's own descriptor is used only inside its RawConn callbacks,
// which hold a reference to it, so a concurrent Close can never let a read,
// a write or an ioctl reach a reused descriptor number.
type ptyMaster struct {
	file     *os.File // the master: O_NONBLOCK, not in the runtime poller
	readable *os.File // epoll set: the master for EPOLLIN
	writable *os.File // epoll set: the master for EPOLLOUT while a write waits

	fileConn, readableConn, writableConn syscall.RawConn
	// closed is set by Close; a call that fails after it says os.ErrClosed
	// (the RawConns report their own error for a closed file).
	closed atomic.Bool

	// The read, the raw write and the Write under way: one of each at a
	// time (there is one reader, the output copier, and one writer, the
	// input copier). Their state lives here and their callbacks are bound
	// once, in newPTYMaster, so that reads and writes that do not wait
	// allocate nothing here: closures made anew for every read and write
	// were garbage in proportion to what a session typed and printed, 6 to
	// 8 KiB more a session in the 64 sessions' memory reading. A callback
	// must not call Read or Write on the same master: it would wait for
	// itself.
	readMu, rawWriteMu, writeMu sync.Mutex
	read, rawWrite              rawOp
	input                       struct {
		p   []byte
		n   int
		err error
	}
	onReadable, onMasterRead, onMasterWrite, onInput func(fd uintptr) bool
}

// rawOp is a RawConn Read or Write under way on the master.
type rawOp struct {
	f    func(fd uintptr) bool // the caller's callback
	done bool                  // f returned true
	err  error                 // a read: the master's own RawConn failed
}

// newPTYMaster takes ownership of fd, a PTY master in blocking mode (so that
// os.NewFile leaves it out of the runtime poller), and switches it to
// non-blocking for the reads and writes below.
func newPTYMaster(fd int, name string) (_ *ptyMaster, err error) {
	m := &ptyMaster{file: os.NewFile(uintptr(fd), name)}
	m.onReadable, m.onMasterRead, m.onMasterWrite, m.onInput = m.readableStep, m.masterReadStep, m.masterWriteStep, m.inputStep
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, os.NewSyscallError("set nonblock", err)
	}
	if m.readable, err = newEpollSet("pty master input readiness"); err != nil {
		return nil, err
	}
	if m.writable, err = newEpollSet("pty master output readiness"); err != nil {
		return nil, err
	}
	if m.fileConn, err = m.file.SyscallConn(); err != nil {
		return nil, err
	}
	if m.readableConn, err = m.readable.SyscallConn(); err != nil {
		return nil, err
	}
	if m.writableConn, err = m.writable.SyscallConn(); err != nil {
		return nil, err
	}
	var ctlErr error
	err = m.readableConn.Control(func(set uintptr) {
		// A hang-up (no slave open) comes as EPOLLHUP, which epoll
		// reports whatever the mask.
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		ctlErr = unix.EpollCtl(int(set), unix.EPOLL_CTL_ADD, fd, &ev)
	})
	if err != nil {
		return nil, err
	}
	if ctlErr != nil {
		return nil, os.NewSyscallError("epoll_ctl add pty master", ctlErr)
	}
	return m, nil
}

// newEpollSet returns an empty epoll set registered with the runtime
// poller. Deadlines are how every wait on the master is bounded; a set the
// poller does not take is refused here rather than discovered at the drain.
func newEpollSet(name string) (*os.File, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("set nonblock", err)
	}
	set := os.NewFile(uintptr(fd), name)
	if err := set.SetReadDeadline(time.Time{}); err != nil {
		set.Close()
		return nil, fmt.Errorf("%s is not pollable: %w", name, err)
	}
	return set, nil
}

// SyscallConn gives readBatch and the ioctls the master's descriptor, with
// the waits described on ptyMaster.
func (m *ptyMaster) SyscallConn() (syscall.RawConn, error) { return masterConn{m}, nil }

// SetReadDeadline bounds the reads' waits (the drain after the shell's exit).
func (m *ptyMaster) SetReadDeadline(t time.Time) error { return m.readable.SetReadDeadline(t) }

// Write writes all of p to the terminal's input, waiting while its queue is
// full (back pressure: the client's bytes wait in the channel, none is
// dropped). It returns early only on a write error or Close.
func (m *ptyMaster) Write(p []byte) (int, error) {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	m.input.p, m.input.n, m.input.err = p, 0, nil
	err := masterConn{m}.Write(m.onInput)
	written := m.input.n
	if err == nil {
		err = m.input.err
	}
	m.input.p, m.input.err = nil, nil
	if err != nil {
		return written, &os.PathError{Op: "write", Path: m.file.Name(), Err: err}
	}
	return written, nil
}

// inputStep writes what is left of Write's bytes until the terminal's
// input queue is full (false: wait for room) or all is written.
func (m *ptyMaster) inputStep(fd uintptr) bool {
	in := &m.input
	for in.n < len(in.p) {
		n, err := safefs.RetryEINTR2(func() (int, error) { return unix.Write(int(fd), in.p[in.n:]) })
		if n > 0 {
			in.n += n
		}
		switch {
		case n == 0 && err == nil:
			// Not what a terminal does; a loop on it would never end.
			in.err = io.ErrShortWrite
			return true
		case err == unix.EAGAIN:
			return false
		case err != nil:
			in.err = err
			return true
		}
	}
	return true
}

// Close closes the two sets first: closing a file in the runtime poller
// wakes its waiters and waits for them to leave, so no read or write is
// under way on the master when it is closed, which hangs the terminal up.
func (m *ptyMaster) Close() error {
	m.closed.Store(true)
	var errs []error
	for _, f := range []*os.File{m.readable, m.writable, m.file} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// closedErr is err, or os.ErrClosed for an error after Close.
func (m *ptyMaster) closedErr(err error) error {
	if err != nil && m.closed.Load() {
		return os.ErrClosed
	}
	return err
}

// masterConn is the master's syscall.RawConn: the callbacks get the
// master's descriptor; Read waits on the input set, Write on the output set.
type masterConn struct{ m *ptyMaster }

func (c masterConn) Control(f func(fd uintptr)) error { return c.m.closedErr(c.m.fileConn.Control(f)) }

// Read calls f with the master's descriptor until f returns true, waiting
// between calls until the master has input (or hangs up), the read deadline
// passes, or the master is closed.
func (c masterConn) Read(f func(fd uintptr) bool) error {
	m := c.m
	m.readMu.Lock()
	defer m.readMu.Unlock()
	m.read = rawOp{f: f}
	// Reset even when f panics, so the master keeps no reference to the
	// caller's callback (and what it holds, a batch) past the call.
	defer func() { m.read = rawOp{} }()
	err := m.readableConn.Read(m.onReadable)
	if err == nil {
		err = m.read.err
	}
	return m.closedErr(err)
}

// readableStep runs when the input set may be ready: the caller's callback
// reads, and the wait goes on unless it is done.
func (m *ptyMaster) readableStep(uintptr) bool {
	if err := m.fileConn.Read(m.onMasterRead); err != nil {
		m.read.err = err
		return true
	}
	return m.read.done
}

func (m *ptyMaster) masterReadStep(fd uintptr) bool {
	m.read.done = m.read.f(fd)
	return true
}

// Write calls f with the master's descriptor until f returns true, waiting
// between calls until the master's input queue has room or the master is
// closed.
func (c masterConn) Write(f func(fd uintptr) bool) error {
	m := c.m
	m.rawWriteMu.Lock()
	defer m.rawWriteMu.Unlock()
	m.rawWrite = rawOp{f: f}
	defer func() { m.rawWrite = rawOp{} }()
	for {
		if err := m.fileConn.Write(m.onMasterWrite); err != nil {
			return m.closedErr(err)
		}
		if m.rawWrite.done {
			return nil
		}
		if err := m.waitWritable(); err != nil {
			return m.closedErr(err)
		}
	}
}

func (m *ptyMaster) masterWriteStep(fd uintptr) bool {
	m.rawWrite.done = m.rawWrite.f(fd)
	return true
}

// waitWritable waits until the master is writable: the master joins the
// output set (level-triggered, so a master that is writable already ends
// the wait at once), the wait goes through the runtime poller, and the
// master leaves the set again, so that between waits the shell's reads wake
// nobody.
func (m *ptyMaster) waitWritable() error {
	var waitErr, ctlErr error
	err := m.fileConn.Control(func(master uintptr) {
		waitErr = m.writableConn.Read(func(set uintptr) bool {
			ev := unix.EpollEvent{Events: unix.EPOLLOUT, Fd: int32(master)}
			if err := unix.EpollCtl(int(set), unix.EPOLL_CTL_ADD, int(master), &ev); err != nil && err != unix.EEXIST {
				ctlErr = os.NewSyscallError("epoll_ctl add pty master", err)
				return true
			}
			var ready [1]unix.EpollEvent
			n, err := safefs.RetryEINTR2(func() (int, error) { return unix.EpollWait(int(set), ready[:], 0) })
			if err != nil {
				ctlErr = os.NewSyscallError("epoll_wait", err)
				return true
			}
			// With no slave open the master reports EPOLLHUP for good,
			// while its writes fill the slave's queue and then fail with
			// EAGAIN, not EIO: end the write as a read ends, with EIO.
			if n > 0 && ready[0].Events&unix.EPOLLOUT == 0 && ready[0].Events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				ctlErr = unix.EIO
			}
			return n > 0
		})
		// After Close the set is gone, and with it the membership.
		m.writableConn.Control(func(set uintptr) {
			unix.EpollCtl(int(set), unix.EPOLL_CTL_DEL, int(master), nil)
		})
	})
	return errors.Join(err, waitErr, ctlErr)
}
