package login

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/launch"
)

// Process is a started session process of launch/local, or of the agent's
// server in the workload (agentd), which reports its exit over the wire.
//
// Lifecycle: NewProcess (started) → Wait sees the exit without reaping →
// Wait reaps under mu and sets reaped → done closed. Between exit and reaping the
// child is a zombie, so its pid (and process-group id) cannot be reused, and
// Signal may still target -pid safely; after reaped is set it never does.
type Process struct {
	id  launch.Identity // immutable
	cmd *exec.Cmd       // started; cmd.Wait is called only by Wait
	pid int             // immutable; the session, process-group and leader id

	done       chan struct{} // closed by Wait after reaping
	hangupOnce sync.Once

	// auditSes is the kernel audit session id of the process (0: none of
	// its own); auditNote says why there is none. Immutable.
	auditSes  uint32
	auditNote string

	mu     sync.Mutex // guards reaped and the kill(2) calls that depend on it
	reaped bool
}

var _ launch.Process = (*Process)(nil)

// NewProcess supervises cmd, which the caller has started, as the session
// process of id. It has no audit session of its own; Start gives one.
func NewProcess(cmd *exec.Cmd, id launch.Identity) *Process {
	return &Process{id: id, cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{}),
		auditNote: "started without the login trampoline"}
}

// noTrampoline is the audit note of a session started by a program that
// does not host the login trampoline (trampoline_linux.go).
const noTrampoline = "this program does not host the login trampoline (login.TrampolineMain), " +
	"so the session has no audit session of its own"

// Start starts cmd, built by Command for acct, and supervises it. In a
// program that hosts the login trampoline (TrampolineMain), the process
// gets a kernel audit session of its own with loginuid acct's uid
// (AuditSession); elsewhere it starts as cmd.Start would start it. The
// error names the shell path or home directory, never argv or env.
func Start(cmd *exec.Cmd, acct Account) (*Process, error) {
	if !trampolineHost.Load() {
		return startDirect(cmd, acct, noTrampoline)
	}
	tcmd, ses, note, err := startTrampolined(cmd, uint32(acct.ID.UID))
	if errors.Is(err, errNoTrampoline) {
		// Capture must not become a login precondition: start as before,
		// and say why there is no audit session.
		return startDirect(cmd, acct, err.Error())
	}
	if err != nil {
		return nil, err
	}
	p := NewProcess(tcmd, acct.ID)
	p.auditSes, p.auditNote = ses, note
	return p, nil
}

// startDirect starts cmd as os/exec does; note says why the process has
// no audit session of its own.
func startDirect(cmd *exec.Cmd, acct Account, note string) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("login: start shell: %w", err)
	}
	p := NewProcess(cmd, acct.ID)
	p.auditNote = note
	return p, nil
}

// Identity implements Process.
func (p *Process) Identity() launch.Identity { return p.id }

// AuditSession implements launch.Process: the kernel audit session id the
// login trampoline set and confirmed, which the process's children inherit.
func (p *Process) AuditSession() (uint32, bool) { return p.auditSes, p.auditSes != 0 }

// AuditSessionNote implements launch.AuditNoter: why AuditSession is not ok.
func (p *Process) AuditSessionNote() string { return p.auditNote }

// Pid is the session leader's pid, which is also its process-group id.
func (p *Process) Pid() int { return p.pid }

// Wait implements Process. It blocks until the process exits.
func (p *Process) Wait() (launch.Exit, error) {
	// Wait for the exit without reaping (WNOWAIT), then reap under mu, so that a
	// concurrent Signal either runs before the reap (zombie pid, still ours) or
	// sees reaped and does nothing.
	werr := waitExited(p.pid)
	p.mu.Lock()
	// After a waitid error (ECHILD: the child was reaped elsewhere, as when
	// SIGCHLD is set to SIG_IGN) the pid may already be reused, so it counts as
	// reaped too; cmd.Wait then fails at once instead of blocking under mu.
	err := p.cmd.Wait()
	p.reaped = true
	p.mu.Unlock()
	close(p.done)

	if werr != nil {
		return launch.Exit{}, fmt.Errorf("login: wait: %w", werr)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) { // an ExitError is a normal non-zero exit
		return launch.Exit{}, fmt.Errorf("login: wait: %w", err)
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return launch.Exit{}, errors.New("login: wait: no wait status")
	}
	return launch.ExitFromStatus(ws), nil
}

// waitExited blocks until pid has exited, leaving it unreaped (waitid(2) WNOWAIT).
func waitExited(pid int) error {
	var info unix.Siginfo
	err := safefs.RetryEINTR(func() error { return unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil) })
	return os.NewSyscallError("waitid", err)
}

// Signal implements Process: it sends sig to the session's process group.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return fmt.Errorf("login: signal: %w", os.ErrProcessDone)
	}
	// WARNING: kill(-1) signals every process we may signal, and kill(0) our own
	// group. The child of a successful Start never has pid 0 or 1 here (no launcher
	// creates a PID namespace), but a negated bad pid must never reach kill(2).
	if p.pid <= 1 {
		return fmt.Errorf("login: signal: refusing pid %d", p.pid)
	}
	return os.NewSyscallError("kill", syscall.Kill(-p.pid, sig))
}

// Hangup implements Process. Only the first call has an effect.
func (p *Process) Hangup() {
	p.hangupOnce.Do(func() {
		if err := p.Signal(syscall.SIGHUP); errors.Is(err, os.ErrProcessDone) {
			return
		}
		go p.killAfterGrace()
	})
}

// killAfterGrace sends SIGKILL to the group unless Wait reaps the process within
// launch.HangupGrace. It is the only goroutine a Process starts.
func (p *Process) killAfterGrace() {
	defer func() {
		// A panic here must not end the server and every other session with it;
		// the worst outcome of stopping is a process that ignored SIGHUP lives on.
		_ = recover()
	}()
	t := time.NewTimer(launch.HangupGrace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.Signal(syscall.SIGKILL) // after a reap this is a no-op
	}
}
