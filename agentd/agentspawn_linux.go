package agentd

// This file runs in aptl-launch-agent, in the workload: it turns a spawn
// request and the fds that came with it into a started session process.

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

// spawn checks a spawn frame, resolves the user in the workload's own passwd
// and group files, and starts the session. It closes the frame's fds on every
// path: after Start the child holds its own copies on fds 0-2.
func (s *Server) spawn(f agentwire.Frame) (ss *agentSession, acct login.Account, err error) {
	defer f.CloseFiles()
	m, err := agentwire.DecodeSpawn(f.Body)
	if err != nil {
		return nil, login.Account{}, err
	}
	spec, err := specFromSpawn(m, f.Files)
	if err != nil {
		return nil, login.Account{}, err
	}
	if acct, err = s.resolve(spec.User); err != nil {
		return nil, login.Account{}, err
	}
	cmd, err := login.Command(spec, acct)
	if err != nil {
		return nil, login.Account{}, &agentwire.Error{Code: agentwire.CodeStart, Msg: err.Error()}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, login.Account{}, &agentwire.Error{Code: agentwire.CodeBusy, Msg: "the launch agent is shutting down"}
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	// Through the login trampoline (aptl-launch-agent's main hosts it), so
	// the session gets an audit session of its own; bounded by the
	// trampoline's timeout. The error names the shell path or home
	// directory, never argv or env.
	proc, err := login.Start(cmd, acct)
	if err != nil {
		return nil, login.Account{}, &agentwire.Error{Code: agentwire.CodeStart, Msg: err.Error()}
	}
	ss = &agentSession{proc: proc}
	s.leaders[proc.Pid()] = ss
	s.sessions[ss] = struct{}{}
	return ss, acct, nil
}

// specFromSpawn checks a decoded request and its fds and returns the launch.Spec
// they describe. It decides nothing about the user; resolve does.
func specFromSpawn(m agentwire.SpawnMsg, files []*os.File) (launch.Spec, error) {
	spec := launch.Spec{User: m.User, Command: m.Command, Env: m.Env, Term: m.Term}
	switch {
	case !login.ValidLoginName(m.User):
		return launch.Spec{}, agentwire.Protocolf("spawn frame: user is not a valid login name")
	case m.Term != "" && !launch.ValidTerm(m.Term):
		// The broker's rule for TERM (launch.ValidTerm), so that a peer that
		// is not the broker cannot put other bytes into a root shell's env.
		return launch.Spec{}, agentwire.Protocolf("spawn frame: term has a byte outside letters, digits and - _ . +, or more than 64 bytes")
	case strings.IndexByte(m.Command, 0) >= 0:
		return launch.Spec{}, agentwire.Protocolf("spawn frame: command contains NUL")
	}
	switch m.Mode {
	case agentwire.SpawnPTY:
		if len(files) != 1 {
			return launch.Spec{}, agentwire.Protocolf("spawn frame for a PTY carries %d fds, want 1", len(files))
		}
		if err := checkSlave(files[0]); err != nil {
			return launch.Spec{}, err
		}
		spec.TTY = files[0]
	case agentwire.SpawnPipes:
		if len(files) != 3 {
			return launch.Spec{}, agentwire.Protocolf("spawn frame for pipes carries %d fds, want 3", len(files))
		}
		if m.Term != "" {
			return launch.Spec{}, agentwire.Protocolf("spawn frame for pipes has a term")
		}
		for i, want := range []int{unix.O_RDONLY, unix.O_WRONLY, unix.O_WRONLY} {
			if err := checkPipe(files[i], want); err != nil {
				return launch.Spec{}, fmt.Errorf("%w (fd %d of 3)", err, i+1)
			}
		}
		spec.Stdin, spec.Stdout, spec.Stderr = files[0], files[1], files[2]
	default:
		return launch.Spec{}, agentwire.Protocolf("spawn frame: unknown mode %d", m.Mode)
	}
	if err := spec.Check(); err != nil {
		return launch.Spec{}, agentwire.Protocolf("spawn frame: %v", err)
	}
	if err := agentwire.CheckEnv(spec.Env); err != nil {
		return launch.Spec{}, &agentwire.Error{Code: agentwire.CodeEnv, Msg: "spawn refused: " + err.Error()}
	}
	return spec, nil
}

// checkSlave accepts a terminal opened read-write that is not a PTY master:
// the sidecar keeps the master, and an agent that received one would hold
// what the recording depends on (docs/AGENT.md, "The agent adapter").
func checkSlave(f *os.File) error {
	fd := int(f.Fd())
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
		return agentwire.Protocolf("spawn frame: the PTY fd is not a terminal")
	}
	// TIOCGPTN answers only on a master (pty(7), ioctl_tty(2)).
	if _, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN); err == nil {
		return agentwire.Protocolf("spawn frame: the PTY fd is a master, want the slave")
	}
	return checkAccess(fd, unix.O_RDWR)
}

// checkPipe accepts a FIFO opened with the access mode the stream needs.
func checkPipe(f *os.File, mode int) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return agentwire.Protocolf("spawn frame: fstat: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return agentwire.Protocolf("spawn frame: a pipe fd is not a pipe")
	}
	return checkAccess(int(f.Fd()), mode)
}

func checkAccess(fd, mode int) error {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return agentwire.Protocolf("spawn frame: F_GETFL: %v", err)
	}
	if fl&unix.O_ACCMODE != mode {
		return agentwire.Protocolf("spawn frame: an fd is open with the wrong access mode")
	}
	return nil
}

// resolve maps an allow-listed login name to an account in the workload's
// passwd and group files. Unlike launch/local, it never falls back to its own
// user: a name that is not allowed, or not in the workload's passwd, is refused.
func (s *Server) resolve(name string) (login.Account, error) {
	if !s.users[name] {
		return login.Account{}, &agentwire.Error{Code: agentwire.CodeNotAllowed, Msg: "user is not on the agent's allow-list"}
	}
	e, err := login.LookupPasswd(s.passwdPath, name)
	if errors.Is(err, login.ErrUserNotFound) {
		return login.Account{}, &agentwire.Error{Code: agentwire.CodeNoUser, Msg: "user is not in the workload's passwd"}
	}
	if err != nil {
		return login.Account{}, &agentwire.Error{Code: agentwire.CodeNoUser, Msg: "agentd: look up login user: " + err.Error()}
	}
	if e.UID == 0 && !s.cfg.AllowRoot {
		return login.Account{}, &agentwire.Error{Code: agentwire.CodeNotAllowed, Msg: "user has uid 0 and the agent does not allow root"}
	}
	note := "login user " + e.Name + " (workload)"
	if euid := os.Geteuid(); euid != 0 {
		// Without root the agent cannot switch users (development only).
		if e.UID != euid {
			return login.Account{}, &agentwire.Error{Code: agentwire.CodeNotAllowed,
				Msg: fmt.Sprintf("the agent runs as uid %d, not root, and can start sessions only as itself", euid)}
		}
		return login.Account{ID: login.IdentityOf(e, note+", agent not root")}, nil
	}
	acct, err := login.SwitchedAccount(s.groupPath, e, note)
	if err != nil {
		return login.Account{}, &agentwire.Error{Code: agentwire.CodeNoUser, Msg: err.Error()}
	}
	return acct, nil
}
