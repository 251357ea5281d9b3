package testutil

import (
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// StopGrace bounds how long Stop waits for a server to exit after SIGTERM.
// The sidecar's own --shutdown-grace defaults to 10 s; a server still
// running well after it is a defect the test must report, not wait out.
const StopGrace = 30 * time.Second

// Stop ends a server started with cmd.Start: SIGTERM, then up to grace for
// it to exit. A server that outlives the grace gets SIGQUIT, which makes a
// Go program print every goroutine's stack to its stderr (the test's log
// buffer), then SIGKILL; the error says so, so a hang becomes a failure
// with the stacks that explain it instead of a test binary killed at its
// -timeout with only the test's own stacks.
func Stop(cmd *exec.Cmd, grace time.Duration) error {
	if cmd.Process == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		<-done // already gone (os.ErrProcessDone): Wait has reaped it
		return nil
	}
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	}
	cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
	}
	return fmt.Errorf("%s did not exit within %v of SIGTERM (SIGQUIT sent: its goroutines are in its output)", cmd.Path, grace)
}
