package launch

// This file runs in aptl-launch-agent, in the workload: it turns a spawn
// request and the fds that came with it into a started session process.

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// spawn checks a spawn frame, resolves the user in the workload's own passwd
// and group files, and starts the session. It closes the frame's fds on every
// path: after Start the child holds its own copies on fds 0-2.
func (s *AgentServer) spawn(f frame) (ss *agentSession, acct account, err error) {
	defer f.closeFiles()
	m, err := decodeSpawn(f.body)
	if err != nil {
		return nil, account{}, err
	}
	spec, err := specFromSpawn(m, f.files)
	if err != nil {
		return nil, account{}, err
	}
	if acct, err = s.resolve(spec.User); err != nil {
		return nil, account{}, err
	}
	cmd, err := newLocalCommand(spec, acct)
	if err != nil {
		return nil, account{}, &wireError{code: errCodeStart, msg: err.Error()}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, account{}, &wireError{code: errCodeBusy, msg: "the launch agent is shutting down"}
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	// The error names the shell path or home directory, never argv or env.
	if err := cmd.Start(); err != nil {
		return nil, account{}, &wireError{code: errCodeStart, msg: "launch: start shell: " + err.Error()}
	}
	ss = &agentSession{proc: newLocalProcess(cmd, acct.id)}
	s.leaders[cmd.Process.Pid] = ss
	s.sessions[ss] = struct{}{}
	return ss, acct, nil
}

// specFromSpawn checks a decoded request and its fds and returns the Spec
// they describe. It decides nothing about the user; resolve does.
func specFromSpawn(m spawnMsg, files []*os.File) (Spec, error) {
	spec := Spec{User: m.user, Command: m.command, Env: m.env, Term: m.term}
	switch {
	case !ValidLoginName(m.user):
		return Spec{}, protoErrorf("spawn frame: user is not a valid login name")
	case !validTerm(m.term):
		return Spec{}, protoErrorf("spawn frame: term has a byte outside printable ASCII")
	case strings.IndexByte(m.command, 0) >= 0:
		return Spec{}, protoErrorf("spawn frame: command contains NUL")
	}
	switch m.mode {
	case spawnPTY:
		if len(files) != 1 {
			return Spec{}, protoErrorf("spawn frame for a PTY carries %d fds, want 1", len(files))
		}
		if err := checkSlave(files[0]); err != nil {
			return Spec{}, err
		}
		spec.TTY = files[0]
	case spawnPipes:
		if len(files) != 3 {
			return Spec{}, protoErrorf("spawn frame for pipes carries %d fds, want 3", len(files))
		}
		if m.term != "" {
			return Spec{}, protoErrorf("spawn frame for pipes has a term")
		}
		for i, want := range []int{unix.O_RDONLY, unix.O_WRONLY, unix.O_WRONLY} {
			if err := checkPipe(files[i], want); err != nil {
				return Spec{}, fmt.Errorf("%w (fd %d of 3)", err, i+1)
			}
		}
		spec.Stdin, spec.Stdout, spec.Stderr = files[0], files[1], files[2]
	default:
		return Spec{}, protoErrorf("spawn frame: unknown mode %d", m.mode)
	}
	if err := spec.check(); err != nil {
		return Spec{}, protoErrorf("spawn frame: %v", err)
	}
	if err := checkAgentEnv(spec.Env); err != nil {
		return Spec{}, &wireError{code: errCodeEnv, msg: "spawn refused: " + err.Error()}
	}
	return spec, nil
}

func validTerm(t string) bool {
	for _, c := range []byte(t) {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// checkSlave accepts a terminal opened read-write that is not a PTY master:
// the sidecar keeps the master, and an agent that received one would hold
// what the recording depends on (DESIGN.md §3.5).
func checkSlave(f *os.File) error {
	fd := int(f.Fd())
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
		return protoErrorf("spawn frame: the PTY fd is not a terminal")
	}
	// TIOCGPTN answers only on a master (pty(7), ioctl_tty(2)).
	if _, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN); err == nil {
		return protoErrorf("spawn frame: the PTY fd is a master, want the slave")
	}
	return checkAccess(fd, unix.O_RDWR)
}

// checkPipe accepts a FIFO opened with the access mode the stream needs.
func checkPipe(f *os.File, mode int) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return protoErrorf("spawn frame: fstat: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return protoErrorf("spawn frame: a pipe fd is not a pipe")
	}
	return checkAccess(int(f.Fd()), mode)
}

func checkAccess(fd, mode int) error {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return protoErrorf("spawn frame: F_GETFL: %v", err)
	}
	if fl&unix.O_ACCMODE != mode {
		return protoErrorf("spawn frame: an fd is open with the wrong access mode")
	}
	return nil
}

// resolve maps an allow-listed login name to an account in the workload's
// passwd and group files. Unlike Local, it never falls back to its own
// user: a name that is not allowed, or not in the workload's passwd, is refused.
func (s *AgentServer) resolve(login string) (account, error) {
	if !s.users[login] {
		return account{}, &wireError{code: errCodeNotAllowed, msg: "user is not on the agent's allow-list"}
	}
	e, err := lookupPasswd(s.passwdPath, login)
	if errors.Is(err, errUserNotFound) {
		return account{}, &wireError{code: errCodeNoUser, msg: "user is not in the workload's passwd"}
	}
	if err != nil {
		return account{}, &wireError{code: errCodeNoUser, msg: "launch: look up login user: " + err.Error()}
	}
	if e.UID == 0 && !s.cfg.AllowRoot {
		return account{}, &wireError{code: errCodeNotAllowed, msg: "user has uid 0 and the agent does not allow root"}
	}
	note := "login user " + e.Name + " (workload)"
	if euid := os.Geteuid(); euid != 0 {
		// Without root the agent cannot switch users (development only).
		if e.UID != euid {
			return account{}, &wireError{code: errCodeNotAllowed,
				msg: fmt.Sprintf("the agent runs as uid %d, not root, and can start sessions only as itself", euid)}
		}
		return account{id: identityOf(e, note+", agent not root")}, nil
	}
	acct, err := switchedAccount(s.groupPath, e, note)
	if err != nil {
		return account{}, &wireError{code: errCodeNoUser, msg: err.Error()}
	}
	return acct, nil
}
