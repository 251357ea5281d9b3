package login

import (
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// sigmaskReexecEnv marks the one re-exec with an empty signal mask, so a
// mask that cannot be cleared is reported instead of re-executing forever.
// Sessions never see it: their env is built from scratch (Command).
const sigmaskReexecEnv = "APTL_SIGMASK_REEXEC"

// EnsureEmptySigmask re-executes the calling program (the sidecar with the
// local adapter, or the agent) with an empty signal mask if it was started
// with signals blocked. Call it first thing in main.
//
// Why: a session process must start with an empty mask (or `kill -INT` of the
// session does nothing; docs/OPERATING.md, "Behaviour a client can rely on"), and
// a Go child inherits the mask of the runtime thread that forks it
// (runtime.AfterForkInChild restores m.sigmask), which is the mask the agent
// was started with minus the signals the runtime unblocks for itself. The
// runtime offers no way to change that for children, but execve(2) keeps the
// calling thread's mask, so clearing it on this thread and exec'ing our own
// binary starts the program over with an empty one. Returns only if no re-exec
// was needed (or it failed); a second blocked start is an error.
//
// WARNING: without this, `kill -INT` of a session may do nothing. Re-verify with:
//
//	go test -run TestAgentClearsBlockedSignals ./cmd/aptl-launch-agent/
func EnsureEmptySigmask() error {
	runtime.LockOSThread() // the mask read, cleared and kept across execve is this thread's
	defer runtime.UnlockOSThread()
	var mask unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, nil, &mask); err != nil {
		return fmt.Errorf("read signal mask: %w", err)
	}
	if mask == (unix.Sigset_t{}) {
		return nil
	}
	if os.Getenv(sigmaskReexecEnv) != "" {
		return fmt.Errorf("signal mask %#x still set after re-exec", mask.Val[0])
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("re-exec with an empty signal mask: %w", err)
	}
	var empty unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &empty, nil); err != nil {
		return fmt.Errorf("clear signal mask: %w", err)
	}
	err = syscall.Exec(exe, os.Args, append(os.Environ(), sigmaskReexecEnv+"=1"))
	return fmt.Errorf("re-exec with an empty signal mask: %w", err)
}
