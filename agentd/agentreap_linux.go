package agentd

// This file runs in aptl-launch-agent, in the workload, when the agent is
// PID 1 of its namespace (a container's entrypoint, or `unshare --pid --fork`).

import (
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"golang.org/x/sys/unix"
)

// startReaper reaps orphans when the agent is PID 1: every process whose
// parent exits is re-parented to PID 1 (the namespace's child reaper,
// pid_namespaces(7)), and one that never reaps them fills the process table
// with zombies (a session's `nohup cmd &` that outlives its shell). Session
// leaders are never reaped here: their Wait (login.Process) must see the
// status. The returned func stops the reaper.
func (s *Server) startReaper() (stop func()) {
	if os.Getpid() != 1 {
		return func() {}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	done := make(chan struct{})
	go func() {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("orphan reaper stopped", "panic", r)
			}
		}()
		for {
			select {
			case <-done:
				return
			case <-ch:
				s.reapOrphans()
			}
		}
	}()
	s.log.Info("reaping orphans: the agent is PID 1 of its namespace")
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// reapOrphans collects the exit status of every child that is not a session
// leader. WNOHANG: a child still running is left alone.
func (s *Server) reapOrphans() {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	for _, pid := range childPIDs() {
		if s.leaders[pid] != nil {
			continue
		}
		var ws unix.WaitStatus
		safefs.RetryEINTR2(func() (int, error) { return unix.Wait4(pid, &ws, unix.WNOHANG, nil) })
	}
}

// childPIDs lists this process's children from /proc/self/task/*/children
// (proc(5)): a child belongs to the thread that forked it, and orphans to
// the reaper thread, so every thread is read.
func childPIDs() []int {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(field); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
