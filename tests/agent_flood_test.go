package tests

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/agentclient"
)

// Bounds of TestAgentFlood.
const (
	floodWorkers  = 4  // flooders, half of them in the workload's PID namespace
	floodHold     = 64 // connections each flooder keeps open at once
	floodSessions = 20 // sessions the sidecar starts during the flood
	// floodMaxFDs bounds the agent's open fds while 4×64 refused peers are
	// connected: stdio, the listener, the runtime's epoll and pipe, and one
	// session's connection at a time, with room to spare; an agent that
	// held each refused peer would need one per peer.
	floodMaxFDs = 32
)

// TestAgentFlood floods the agent with connections from processes that are
// not the sidecar while the sidecar's adapter starts sessions: every session
// starts, the agent's open fds stay bounded (a refused peer is closed at its
// accept), and every refusal is in the agent's log, most as a count, so the
// log does not grow with the flood.
func TestAgentFlood(t *testing.T) {
	t.Parallel() // see parallel_test.go
	pa := startPeerTestAgent(t)
	user := testAgentUserFlags(t)[1]
	var flooders []*flooder
	for i := 0; i < floodWorkers; i++ {
		flooders = append(flooders, pa.startFlooder(t, i%2 == 1, floodHold))
	}
	maxFDs := 0
	for i := 0; i < floodSessions; i++ {
		if err := runAgentSession(pa.agent, user, fmt.Sprintf("ok-%d", i)); err != nil {
			t.Errorf("session %d during the flood: %v", i, err)
		}
		maxFDs = max(maxFDs, openFDCount(t, pa.ns.pid))
	}
	refused := 0
	for _, f := range flooders {
		refused += f.stop(t)
	}
	t.Logf("%d refused connections; the agent held at most %d fds; its status: %s", refused, maxFDs, procStatus(pa.ns.pid, "VmRSS", "Threads"))
	if maxFDs > floodMaxFDs {
		t.Errorf("the agent held %d fds during the flood, want at most %d", maxFDs, floodMaxFDs)
	}
	var lines, counted int
	waitFor(t, 10*time.Second, "every refused connection in the agent's log", func() bool {
		lines, counted = refusalTally(t, pa.ns.logs.String())
		return lines+counted >= refused
	})
	if lines+counted != refused {
		t.Errorf("the agent's log accounts for %d refusals (%d lines, %d counted), the flooders made %d connections",
			lines+counted, lines, counted, refused)
	}
	if lines*10 > refused {
		t.Errorf("%d refusal lines for %d refusals: the log grows with the flood", lines, refused)
	}
}

// runAgentSession starts `echo want` through the sidecar's adapter on pipes
// and checks its output and exit.
func runAgentSession(a *agentclient.Agent, user, want string) error {
	var ours, theirs [3]*os.File
	for i := range ours {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		if i == 0 {
			theirs[i], ours[i] = r, w
		} else {
			theirs[i], ours[i] = w, r
		}
		defer ours[i].Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	p, err := a.Launch(ctx, launch.Spec{User: user, Command: "echo " + want, Stdin: theirs[0], Stdout: theirs[1], Stderr: theirs[2]})
	if err != nil {
		return err
	}
	ours[0].Close()
	ours[1].SetReadDeadline(time.Now().Add(15 * time.Second))
	out, err := io.ReadAll(ours[1])
	if err != nil {
		return fmt.Errorf("read stdout: %w", err)
	}
	exit, err := p.Wait()
	switch {
	case err != nil:
		return err
	case exit != launch.Exit{} || string(out) != want+"\n":
		return fmt.Errorf("exit %+v, stdout %q", exit, out)
	}
	return nil
}

// refusalTally counts the agent's refusal lines and the refusals its
// rate limit reported only as counts.
func refusalTally(t *testing.T, logs string) (lines, counted int) {
	for _, rec := range agentLogRecords(t, logs) {
		switch rec["msg"] {
		case "connection refused":
			lines++
		case "connection refusals not logged one by one":
			n, _ := rec["count"].(float64)
			counted += int(n)
		}
	}
	return lines, counted
}

// openFDCount counts the open fds of process pid.
func openFDCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("/proc", fmt.Sprint(pid), "fd"))
	if err != nil {
		t.Fatalf("the agent's fds: %v", err)
	}
	return len(ents)
}

// procStatus returns the named lines of /proc/<pid>/status, for the log.
func procStatus(pid int, names ...string) string {
	b, _ := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "status"))
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, n := range names {
			if strings.HasPrefix(line, n+":") {
				out = append(out, strings.Join(strings.Fields(line), " "))
			}
		}
	}
	return strings.Join(out, ", ")
}
