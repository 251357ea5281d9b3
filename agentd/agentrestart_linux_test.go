package agentd

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/agentclient"
	"github.com/aptl/aptl-kali-capture/launch/launchtest"
)

// restartClient is the sidecar's adapter for socket with the given wait,
// logging to logs and counting the reachability hook's calls.
func restartClient(t *testing.T, socket string, wait time.Duration, logs *testutil.LockedBuffer, told *atomic.Int32) *agentclient.Agent {
	t.Helper()
	a, err := agentclient.NewAgent(socket, agentclient.WithReplyTimeout(testutil.FailAfter), agentclient.WithAgentUID(os.Geteuid()),
		agentclient.InsecureAllowAgentInSamePIDNS(), agentclient.WithUnreachableWait(wait),
		agentclient.WithReachabilityHook(func() { told.Add(1) }),
		agentclient.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// runTrue launches `true` through a and waits for it.
func runTrue(t *testing.T, a *agentclient.Agent) error {
	t.Helper()
	spec, stdin, stdout, stderr := launchtest.PipeSpec(t, "tester", "true")
	defer stdin.Close()
	defer stdout.Close()
	defer stderr.Close()
	p, err := a.Launch(context.Background(), spec)
	if err != nil {
		return err
	}
	if e := launchtest.WaitExit(t, p); e != (launch.Exit{}) {
		t.Errorf("exit %+v, want 0", e)
	}
	return nil
}

// TestLaunchWaitsForRestartedAgent: a session start that finds no agent
// waits for it, and starts once the agent (restarted, as the compose
// supervisor does) answers within the wait; the wait tells readiness at
// once, and the restart is logged with both instances.
func TestLaunchWaitsForRestartedAgent(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock")
	first := serveTestAgent(t, socket, nil)
	logs := &testutil.LockedBuffer{}
	var told atomic.Int32
	a := restartClient(t, socket, 20*time.Second, logs, &told)
	if err := runTrue(t, a); err != nil {
		t.Fatalf("session through the first agent: %v", err)
	}
	first.stop() // the agent dies; its socket file stays, as a killed agent's does

	done := make(chan error, 1)
	go func() { done <- runTrue(t, a) }()
	deadline := time.Now().Add(testutil.FailAfter)
	for told.Load() == 0 { // the launch found no agent and said so
		if time.Now().After(deadline) {
			t.Fatal("the launch never reported the agent unreachable")
		}
		time.Sleep(10 * time.Millisecond) // poll interval, not synchronisation
	}
	second := serveTestAgent(t, socket, nil)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("session opened while the agent restarted: %v\n%s", err, logs)
		}
	case <-time.After(testutil.FailAfter):
		t.Fatal("the launch did not return after the agent came back")
	}
	if n := told.Load(); n < 2 {
		t.Errorf("reachability hook called %d times, want at the failure and at the success after waiting", n)
	}
	out := logs.String()
	for _, want := range []string{"launch agent unreachable; the session start waits for it", "launch agent answered; the session starts",
		"launch agent instance", "instance=" + first.srv.Instance().ID,
		"launch agent restarted", "instance=" + second.srv.Instance().ID, "previous_instance=" + first.srv.Instance().ID} {
		if !strings.Contains(out, want) {
			t.Errorf("sidecar log lacks %q:\n%s", want, out)
		}
	}
	if first.srv.Instance().ID == second.srv.Instance().ID {
		t.Errorf("two runs of the agent share instance %s", first.srv.Instance().ID)
	}
}

// TestLaunchWaitIsBounded: with no agent at all, a session start waits for
// the configured time and no longer, then refuses with ErrAgentUnreachable;
// a wait of 0 refuses at once without retrying.
func TestLaunchWaitIsBounded(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "none.sock")
	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		var told atomic.Int32
		a := restartClient(t, socket, wait, &testutil.LockedBuffer{}, &told)
		start := time.Now()
		err := runTrue(t, a)
		took := time.Since(start)
		if !errors.Is(err, launch.ErrAgentUnreachable) {
			t.Fatalf("wait %v: Launch = %v, want ErrAgentUnreachable", wait, err)
		}
		if took < wait || took > wait+testutil.FailAfter/3 {
			t.Errorf("wait %v: refused after %v", wait, took)
		}
		wantTold := int32(1) // at the first failure
		if wait == 0 {
			wantTold = 0 // no wait: nothing to tell
		}
		if told.Load() != wantTold {
			t.Errorf("wait %v: reachability hook called %d times, want %d", wait, told.Load(), wantTold)
		}
		if wait > 0 && !strings.Contains(err.Error(), "waited 300ms") {
			t.Errorf("wait %v: error %q does not say how long it waited", wait, err)
		}
	}
}
