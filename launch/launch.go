// Package launch starts session processes on the slave end of a sidecar-owned PTY (or pipes).
//
// The broker allocates the PTY pair (or three pipes for exec without a PTY), keeps
// the master, and hands only the slave end(s) to a Launcher. The seam carries no
// PIDs or socket details, so an adapter that starts the shell in another
// container (launch/agentclient, docs/AGENT.md "The agent adapter") implements it
// without broker changes. This package is the seam only; the adapters are
// launch/local and launch/agentclient.
package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// HangupGrace is how long Hangup waits after SIGHUP before it sends SIGKILL to the
// process group. A shell that handles SIGHUP (bash saves history, then exits) needs
// well under a second; one that ignores it (an empty HUP trap) would otherwise keep
// a closed session's shell alive forever. The SIGKILL reaches the group only while
// its leader is unreaped (a reaped leader's pid may be reused): a member that ignores
// SIGHUP and outlives the leader (nohup) lives on, as it does under sshd. The broker
// closes the master after the drain, which hangs the terminal up for such members.
const HangupGrace = 2 * time.Second

// MaxSignal is the highest Linux signal number (SIGRTMAX); a wait status
// reports no signal above it.
const MaxSignal = 64

// Spec is a spawn request. Build it in one step and start it in another (tests inspect it).
type Spec struct {
	User    string   // SSH login name (already authorized by the broker)
	Command string   // "" means an interactive login shell; otherwise run `shell -c Command`
	Env     []string // extra KEY=VALUE pairs the broker accepted (already validated)
	Term    string   // TERM for PTY sessions; "" without a PTY
	// Exactly one of TTY or the three pipe ends is set. Launch takes ownership of
	// all of them: it closes this process's copies once the child holds them,
	// on success and on failure alike, so the server keeps no copy of the slave.
	TTY                   *os.File
	Stdin, Stdout, Stderr *os.File
}

// Check reports whether the spec's fds and env are well-formed. It decides
// nothing about policy: the broker already chose the user, command and env.
func (s Spec) Check() error {
	pipes := 0
	for _, f := range []*os.File{s.Stdin, s.Stdout, s.Stderr} {
		if f != nil {
			pipes++
		}
	}
	switch {
	case s.TTY != nil && pipes != 0:
		return errors.New("launch: spec has both a TTY and pipes")
	case s.TTY == nil && pipes != 3:
		return errors.New("launch: spec needs a TTY or all three of stdin, stdout and stderr")
	case s.User == "":
		return errors.New("launch: spec has no user")
	}
	for i, kv := range s.Env {
		// Report the index only: env values may hold secrets, and nothing logs them.
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("launch: spec env entry %d is not KEY=VALUE", i)
		}
	}
	return nil
}

// CloseFiles closes this process's copies of every fd in the spec. Close errors
// are ignored: the fds were only ever handed on, never written through here.
func (s Spec) CloseFiles() {
	for _, f := range []*os.File{s.TTY, s.Stdin, s.Stdout, s.Stderr} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// maxTermLen bounds a TERM value; terminfo names are far shorter.
const maxTermLen = 64

// ValidTerm reports whether t is a plausible terminfo name: 1 to 64 letters,
// digits, '-', '_', '.' or '+'. It is the one rule for TERM: the broker
// refuses a pty-req with another (broker/requests.go), and the launch agent
// refuses a spawn request with another (agentd/agentspawn_linux.go), as TERM
// reaches a root shell's environment and the typescript header.
func ValidTerm(t string) bool {
	if t == "" || len(t) > maxTermLen {
		return false
	}
	for _, c := range []byte(t) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == '+':
		default:
			return false
		}
	}
	return true
}

// ErrAgentUnreachable reports that a launcher that starts processes
// elsewhere (the launch agent, launch/agentclient) could not reach it: no
// session can start, and the broker tells the client so.
var ErrAgentUnreachable = errors.New("launch agent unreachable")

// Identity says whom the process runs as; the session record stores it.
type Identity struct {
	User        string // account the process runs as
	UID, GID    int
	Home, Shell string
	Note        string // e.g. "login user kali", or "server user (not root)", or "server user (login user absent)"
	// Source says who established the identity: the sidecar itself
	// (IdentityResolved) or the launch agent, which the sidecar cannot check
	// (IdentityReported).
	Source string
}

// Identity sources.
const (
	IdentityResolved = "resolved by the sidecar"
	IdentityReported = "reported by the launch agent, not verifiable by the sidecar"
)

// Exit is how the process ended.
type Exit struct {
	Code       int            // exit code when Signal == 0
	Signal     syscall.Signal // non-zero when killed by a signal
	CoreDumped bool
}

// ExitFromStatus converts a wait(2) status of an exited or killed process.
func ExitFromStatus(ws syscall.WaitStatus) Exit {
	if ws.Signaled() {
		return Exit{Signal: ws.Signal(), CoreDumped: ws.CoreDump()}
	}
	return Exit{Code: ws.ExitStatus()}
}

// Process is a started session process. Wait blocks until it exits and may be called
// by exactly one goroutine; Signal and Hangup are safe from any goroutine, and are no-ops
// returning nil (or an error wrapping os.ErrProcessDone) once Wait has reaped the process.
type Process interface {
	Identity() Identity
	Wait() (Exit, error)
	Signal(sig syscall.Signal) error // to the session's process group
	// Hangup sends SIGHUP to the process group, and SIGKILL to the group if it has not
	// been reaped after a bounded grace (HangupGrace). Non-blocking.
	Hangup()
	// AuditSession is the kernel audit session id (`ses` in audit records,
	// /proc/<pid>/sessionid) of the session's login process, which its
	// children inherit; ok is false when the adapter could not give it one
	// of its own (AuditNoter says why).
	AuditSession() (ses uint32, ok bool)
}

// AuditNoter is a Process that says why AuditSession is not ok (an older
// launch agent, a loginuid already set, a kernel without audit).
type AuditNoter interface {
	AuditSessionNote() string
}

// Launcher starts session processes. Launch does not block beyond starting the
// process; ctx bounds only the start, never the process's lifetime (the broker ends
// it with Hangup).
type Launcher interface {
	Name() string // "local" or "agent": written into the session record
	Launch(ctx context.Context, spec Spec) (Process, error)
}
