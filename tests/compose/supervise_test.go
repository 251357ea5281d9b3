package compose

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// supervised runs compose/kali/aptl-agent-supervise on the host with
// /bin/sleep as its agent and ready as the sidecar's readiness file; it
// returns once the agent runs, and a channel that gets the exit.
func supervised(t *testing.T, ready string) (*exec.Cmd, *lockedBuffer, chan error) {
	t.Helper()
	if entries, _ := os.ReadDir("/sys/class/net"); len(entries) < 2 {
		t.Skip("this host's network namespace has only lo: the supervisor would take it for orphaned")
	}
	script := strings.Replace(string(readFile(t, "compose/kali/aptl-agent-supervise")),
		"agent=/opt/aptl-agent/aptl-launch-agent", "agent=/bin/sleep", 1)
	path := filepath.Join(t.TempDir(), "supervise")
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", path, "600")
	cmd.Env = append(os.Environ(), "APTL_AGENT_EXIT_WHEN_ORPHANED=1", "APTL_AGENT_SIDECAR_READY_FILE="+ready,
		"APTL_AGENT_STOP_SETTLE=2", "APTL_AGENT_STOP_WAIT=15")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the agent goes with it
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pollUntil(t, 10*time.Second, "the supervisor to start its agent and join the sidecar", func() bool {
		return strings.Contains(logs.String(), "serving with the sidecar of ready_at=")
	})
	return cmd, logs, exited
}

func pollUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

func writeReady(t *testing.T, path, readyAt string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("ready_at="+readyAt+"\nlisten=ok\nlaunch=ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSuperviseStop: at SIGTERM with the sidecar's readiness file withdrawn
// (the sidecar is stopping too, as in docker-compose restart), the
// supervisor does not exit until the file names a new sidecar, so the
// engine's start of the workload finds one running; with the joined sidecar
// serving throughout (only the workload stops) it exits after the settle
// time, without waiting for one.
func TestSuperviseStop(t *testing.T) {
	t.Run("sidecar stopping too", func(t *testing.T) {
		ready := filepath.Join(t.TempDir(), "ready")
		writeReady(t, ready, "2026-01-01T00:00:00.1Z")
		cmd, logs, exited := supervised(t, ready)
		os.Remove(ready)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			t.Fatalf("the supervisor exited (%v) while no sidecar served:\n%s", err, logs.String())
		case <-time.After(4 * time.Second): // beyond the 2 s settle: it must still be waiting
		}
		writeReady(t, ready, "2026-01-01T00:00:09.2Z")
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("exit after a new sidecar: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the supervisor did not exit once a new sidecar served:\n%s", logs.String())
		}
		if !strings.Contains(logs.String(), "a new sidecar serves; exiting") {
			t.Errorf("the supervisor's log does not say why it exited:\n%s", logs.String())
		}
	})
	t.Run("workload alone", func(t *testing.T) {
		ready := filepath.Join(t.TempDir(), "ready")
		writeReady(t, ready, "2026-01-01T00:00:00.1Z")
		cmd, logs, exited := supervised(t, ready)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("exit: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the supervisor did not exit with its sidecar serving:\n%s", logs.String())
		}
		if strings.Contains(logs.String(), "waiting up to") {
			t.Errorf("the supervisor waited for a new sidecar though its own served:\n%s", logs.String())
		}
	})
}
