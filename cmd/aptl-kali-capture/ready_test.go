//go:build linux

package main

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
)

// switchProber answers as its state says: ok, failing, or blocking until
// its context ends (an agent that accepts and never replies).
type switchProber struct{ state atomic.Value }

func (p *switchProber) Probe(ctx context.Context) error {
	switch p.state.Load() {
	case "ok":
		return nil
	case "block":
		<-ctx.Done()
		return ctx.Err()
	}
	return errors.New("agentclient: the launch agent in the workload is unreachable")
}

// watchedReadiness runs watchLaunch over p with a probe interval of an hour,
// so that any change within the test comes from the degraded cadence or a kick.
func watchedReadiness(t *testing.T, p prober, kick launchKick) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ready")
	r := newReadiness(path, "agent", "127.0.0.1:2222", slog.New(slog.DiscardHandler))
	r.witnesses = witnessStates{pcap: stateDisabled, audit: stateDisabled}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.watchLaunch(ctx, p, time.Hour, kick) }()
	t.Cleanup(func() { cancel(); <-done })
	return path
}

// waitLaunch polls the readiness file until it says launch=want.
func waitLaunch(t *testing.T, path, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		if readinessValue(path, "launch") == want {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not synchronisation
	}
	t.Fatalf("launch=%s not written within %v (file says %s)", want, within, readinessValue(path, "launch"))
	return 0
}

// TestWatchLaunchKick: with an agent that answered at the last probe and a
// probe interval of an hour, a kick (a session start that found the agent
// unreachable) makes readiness say launch=degraded at once, and the
// degraded cadence brings launch=ok back soon after the agent answers.
func TestWatchLaunchKick(t *testing.T) {
	p := &switchProber{}
	p.state.Store("ok")
	kick := newLaunchKick()
	path := watchedReadiness(t, p, kick)
	waitLaunch(t, path, stateOK, 5*time.Second)
	p.state.Store("fail")
	kick.send()
	kick.send() // a second nudge while one is pending never blocks
	waitLaunch(t, path, stateDegraded, 5*time.Second)
	p.state.Store("ok")
	if took := waitLaunch(t, path, stateOK, 5*time.Second); took > 5*degradedProbeInterval {
		t.Errorf("launch=ok back after %v, want within a few degraded probes (%v each)", took, degradedProbeInterval)
	}
}

// TestWatchLaunchProbeBounded: an agent that accepts and never answers is
// degraded after probeTimeout, not when it chooses to answer.
func TestWatchLaunchProbeBounded(t *testing.T) {
	p := &switchProber{}
	p.state.Store("block")
	path := watchedReadiness(t, p, newLaunchKick())
	if took := waitLaunch(t, path, stateDegraded, probeTimeout+5*time.Second); took < probeTimeout/2 {
		t.Errorf("degraded after %v, before the probe's %v bound", took, probeTimeout)
	}
}

// TestHealthSaysLaunchDegraded: health fails while no agent answers, and
// says so by the readiness key, not with a bare value.
func TestHealthSaysLaunchDegraded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ready")
	r := newReadiness(path, "agent", "127.0.0.1:1", slog.New(slog.DiscardHandler))
	r.witnesses = witnessStates{pcap: stateDisabled, audit: stateDisabled}
	r.set(stateDegraded)
	if data, err := os.ReadFile(path); err != nil || !strings.Contains(string(data), "\nlaunch=degraded\n") {
		t.Fatalf("readiness file: %q, %v", data, err)
	}
	err := checkHealth(path, "")
	if err == nil || !strings.Contains(err.Error(), "launch=degraded") || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("health with no agent: %v, want a failure naming launch=degraded", err)
	}
}
