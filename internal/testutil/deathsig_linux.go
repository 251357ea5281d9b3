package testutil

import (
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
)

// StartWithDeathSignal starts cmd so that the kernel sends it sig when the
// test process dies, however it dies: no child outlives a test binary
// killed at its timeout.
//
// The kernel ties the death signal (PR_SET_PDEATHSIG) to the thread that
// forked the child, not to the process, and Go discards a thread whose
// goroutine ends locked to it (RunInNetns does, so that no thread stays in
// another namespace). A child forked from a thread that a parallel test
// then locks and discards would be killed mid-test. So the fork runs on a
// thread locked for it, and that thread waits, without reaping, until the
// child has exited; cmd.Wait is the caller's as usual.
func StartWithDeathSignal(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		pid := cmd.Process.Pid
		started <- nil
		// WNOWAIT leaves the child to cmd.Wait.
		var info unix.Siginfo
		safefs.RetryEINTR(func() error { return unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil) })
	}()
	return <-started
}
