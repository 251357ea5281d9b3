package tests

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestTwoServersDefaultReadyFiles runs two servers on one host, each with
// its defaults in its own folder: each one's health is its own. Stopping
// the second must not break the first one's health, and the first one's
// health must fail once it stops, though the second still runs.
func TestTwoServersDefaultReadyFiles(t *testing.T) {
	bin := buildForLiveTest(t)
	workA, workB := t.TempDir(), t.TempDir()
	srvA, _, logsA := startServe(t, bin, workA)
	srvB, _, _ := startServe(t, bin, workB)
	health := func(work string) error {
		cmd := exec.Command(bin, "health")
		cmd.Dir = work
		return cmd.Run()
	}
	waitFor(t, 10*time.Second, "both servers healthy", func() bool { return health(workA) == nil && health(workB) == nil })

	stop := func(srv *exec.Cmd) {
		srv.Process.Signal(syscall.SIGTERM)
		srv.Wait()
	}
	stop(srvB)
	if err := health(workA); err != nil {
		t.Fatalf("stopping the second server broke the first one's health: %v\n%s", err, logsA.String())
	}
	if health(workB) == nil {
		t.Error("the stopped second server is still healthy")
	}
	srvB2, _, _ := startServe(t, bin, workB)
	defer stop(srvB2)
	waitFor(t, 10*time.Second, "second server healthy again", func() bool { return health(workB) == nil })
	stop(srvA)
	if health(workA) == nil {
		t.Error("the stopped first server is healthy while the second runs")
	}
}
