package broker

import (
	"fmt"
	"os"

	"github.com/creack/pty"

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
// master never passes through the workload (DESIGN §3.5). The terminal
// modes and size are applied to the slave before anything runs on it. It
// returns the slave; the master stays in r.
func (r *run) openPTY(req *ptyRequest) (slaves []*os.File, err error) {
	master, slave, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("pty.Open: %w", err)
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
	r.outputs = []output{{src: master, dst: r.ss.ch}}
	return []*os.File{slave}, nil
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
	r.outputs = []output{{src: ours[1], dst: r.ss.ch}, {src: ours[2], dst: r.ss.ch.Stderr()}}
	return childEnds, nil
}

func setWindow(master *os.File, w window) error {
	err := pty.Setsize(master, &pty.Winsize{
		Rows: uint16(w.rows), Cols: uint16(w.cols), X: uint16(w.width), Y: uint16(w.height),
	})
	if err != nil {
		return fmt.Errorf("set window size: %w", err)
	}
	return nil
}
