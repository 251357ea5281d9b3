package broker

import (
	"fmt"
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/launch"
)

// openEnds allocates the PTY (when the client asked for one) or the pipes,
// puts the child's ends into spec and returns them.
func (r *run) openEnds(spec *launch.Spec) ([]*os.File, error) {
	if r.ss.pty == nil {
		ends, err := r.openPipes()
		if err != nil {
			return nil, err
		}
		spec.Stdin, spec.Stdout, spec.Stderr = ends[0], ends[1], ends[2]
		return ends, nil
	}
	spec.Term = r.ss.pty.term
	ends, err := r.openPTY(r.ss.pty)
	if err != nil {
		return nil, err
	}
	spec.TTY = ends[0]
	return ends, nil
}

// openPTY allocates the session's pair in the sidecar's own devpts, so the
// master never passes through the workload (docs/ARCHITECTURE.md, "The
// launch boundary"). The terminal
// modes and size are applied to the slave before anything runs on it. It
// returns the slave; the master stays in r.
func (r *run) openPTY(req *ptyRequest) (slaves []*os.File, err error) {
	master, slave, err := allocatePTY()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			master.Close()
			slave.Close()
		}
	}()
	if err = setTermModes(slave, req.modes); err != nil {
		return nil, err
	}
	if err = setWindow(master, req.win); err != nil {
		return nil, err
	}
	r.master = master
	r.outputs = []*output{{src: master, dst: r.ss.ch}}
	return []*os.File{slave}, nil
}

// allocatePTY allocates a pair with creack/pty and returns the master as a
// ptyMaster. pty.Open calls Fd() on its master, which switches it to
// blocking mode for good and makes it unusable with deadlines; a duplicate
// of its descriptor becomes the ptyMaster, which sets it non-blocking.
func allocatePTY() (master *ptyMaster, slave *os.File, err error) {
	m, slave, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("pty.Open: %w", err)
	}
	defer m.Close()
	defer func() {
		if err != nil {
			slave.Close()
		}
	}()
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", err)
	}
	if master, err = newPTYMaster(fd, m.Name()); err != nil {
		return nil, nil, err
	}
	return master, slave, nil
}

// openPipes creates stdin, stdout and stderr for a session without a PTY. It
// returns the child's ends (stdin read end, stdout and stderr write ends).
func (r *run) openPipes() (childEnds []*os.File, err error) {
	var ours []*os.File
	defer func() {
		if err != nil {
			closeAll(ours)
			closeAll(childEnds)
		}
	}()
	for i := 0; i < 3; i++ {
		pr, pw, perr := os.Pipe()
		if perr != nil {
			return childEnds, fmt.Errorf("pipe: %w", perr)
		}
		if i == 0 {
			ours, childEnds = append(ours, pw), append(childEnds, pr)
		} else {
			ours, childEnds = append(ours, pr), append(childEnds, pw)
		}
	}
	r.stdin = ours[0]
	r.outputs = []*output{{src: ours[1], dst: r.ss.ch}, {src: ours[2], dst: r.ss.ch.Stderr(), stderr: true}}
	return childEnds, nil
}

// setWindow sets the terminal size through the master. The ioctl runs in a
// RawConn callback, which holds the master's descriptor, so a concurrent
// close cannot hand its number to another file under it.
func setWindow(master *ptyMaster, w window) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return fmt.Errorf("set window size: %w", err)
	}
	ws := &unix.Winsize{Row: uint16(w.rows), Col: uint16(w.cols), Xpixel: uint16(w.width), Ypixel: uint16(w.height)}
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws)
	}); err != nil {
		return fmt.Errorf("set window size: %w", err)
	}
	if ioctlErr != nil {
		return fmt.Errorf("set window size: %w", os.NewSyscallError("TIOCSWINSZ", ioctlErr))
	}
	return nil
}
