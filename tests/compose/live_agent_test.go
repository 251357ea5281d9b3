package compose

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// The agent's restarts and its replacement (docs/AGENT.md, "Agent restarts"
// and "Unattributed sessions"), live: each part stops the workload's
// supervisor (SIGSTOP) where it needs the agent to stay away, and lets it
// go again (SIGCONT) before it returns, so the stack is whole for the next.

// liveAgentRestarts runs the parts in order; every one leaves an agent
// answering.
func liveAgentRestarts(t *testing.T, s *liveStack) {
	t.Run("agent's files read-only for root", func(t *testing.T) { liveAgentFilesReadOnly(t, s) })
	t.Run("health says launch=degraded", func(t *testing.T) { liveLaunchDegraded(t, s) })
	t.Run("session at once after the agent is killed", func(t *testing.T) { liveSessionAtOnce(t, s) })
	t.Run("session waits for a restarting agent", func(t *testing.T) { liveSessionWaitsForAgent(t, s) })
	const id = "s-stand-in"
	t.Run("stand-in agent leaves unattributed sessions", func(t *testing.T) { liveStandInAgent(t, s, id) })
}

// readOnlyProbe tries, as root in the workload, every way to change the
// agent's files; a line starting with CHANGED is the boundary failing.
// (`true`, not `:`, for the append: a failed redirection of a special
// builtin ends a POSIX shell. Appending to the running agent fails with
// ETXTBSY before the mount is looked at; the others fail with EROFS.)
const readOnlyProbe = `
for f in /opt/aptl-agent/aptl-launch-agent /opt/aptl-agent/aptl-agent-supervise; do
	true >>"$f" && echo "CHANGED append $f"
	cp /bin/true "$f.new" && echo "CHANGED create $f.new"
	cp /bin/true /tmp/t && mv -f /tmp/t "$f" && echo "CHANGED replace $f"
	rm -f "$f" && echo "CHANGED remove $f"
	chmod 0777 "$f" && echo "CHANGED chmod $f"
done
mount -o remount,rw /opt/aptl-agent && echo "CHANGED remount"
umount /opt/aptl-agent && echo "CHANGED umount"
grep ' /opt/aptl-agent ' /proc/self/mounts | sed 's/^/MOUNT /'
echo RO-DONE
`

// liveAgentFilesReadOnly: root in the workload (sudo from a session, uid 0
// with the workload's capabilities) cannot write, replace, remove or
// remount the agent's binary or its supervisor.
func liveAgentFilesReadOnly(t *testing.T, s *liveStack) {
	encoded := base64.StdEncoding.EncodeToString([]byte(readOnlyProbe))
	out, err := s.ssh(time.Minute, "s-agent-files", false, "sudo -n sh -c 'echo "+encoded+" | base64 -d | sh 2>&1'")
	if err != nil || !strings.Contains(out, "RO-DONE") {
		t.Fatalf("probe did not run: %v\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "CHANGED ") {
			t.Errorf("root in the workload: %s", line)
		}
	}
	if !strings.Contains(out, "Read-only file system") {
		t.Errorf("no write failed with EROFS:\n%s", out)
	}
	if !strings.Contains(out, "MOUNT ") || !strings.Contains(out, " ro,") {
		t.Errorf("/opt/aptl-agent is not a read-only mount in the workload:\n%s", out)
	}
}

// holdSupervisor stops the workload's supervisor, so that a killed agent
// stays dead, and returns the function that lets it go again (also at the
// test's end, in case the test fails first).
func (s *liveStack) holdSupervisor(t *testing.T) (release func()) {
	t.Helper()
	mustRun(t, 10*time.Second, nil, "docker", "exec", s.workload, "pkill", "-STOP", "-f", "aptl-agent-supervise")
	released := false
	release = func() {
		if !released {
			released = true
			mustRun(t, 10*time.Second, nil, "docker", "exec", s.workload, "pkill", "-CONT", "-f", "aptl-agent-supervise")
		}
	}
	t.Cleanup(release)
	return release
}

func (s *liveStack) killAgent(t *testing.T) {
	t.Helper()
	mustRun(t, 10*time.Second, nil, "docker", "exec", s.workload, "pkill", "-KILL", "-x", "aptl-launch-age")
}

// sidecarLogSince is the sidecar's log from since on.
func (s *liveStack) sidecarLogSince(since time.Time) string {
	out, _ := run(s.t, 20*time.Second, nil, "docker", "logs", "--since", since.UTC().Format(time.RFC3339Nano), sidecarName)
	return out
}

// waitSidecarLog polls the sidecar's log from since on until it holds want.
func (s *liveStack) waitSidecarLog(t *testing.T, since time.Time, want string, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if strings.Contains(s.sidecarLogSince(since), want) {
			return true
		}
		time.Sleep(100 * time.Millisecond) // poll interval, not synchronisation
	}
	return false
}

// liveLaunchDegraded: with no agent (killed, its supervisor held), health
// fails saying launch=degraded; once the agent is back, health passes and
// the sidecar logs the restart.
func liveLaunchDegraded(t *testing.T, s *liveStack) {
	since := time.Now()
	release := s.holdSupervisor(t)
	s.killAgent(t)
	deadline := time.Now().Add(20 * time.Second)
	var out string
	for time.Now().Before(deadline) {
		out, _ = run(t, 10*time.Second, nil, "docker", "exec", sidecarName, "aptl-kali-capture", "health")
		if strings.Contains(out, "launch=degraded") {
			break
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
	}
	if !strings.Contains(out, "not ready: launch=degraded") {
		t.Errorf("health with no agent: %q, want it to fail naming launch=degraded", out)
	}
	release()
	t.Logf("healthy again %v after the supervisor was let go", s.waitHealthy(30*time.Second).Round(100*time.Millisecond))
	if !s.waitSidecarLog(t, since, "launch agent restarted: a new instance answers", 10*time.Second) {
		t.Errorf("the agent's restart is not in the sidecar's log:\n%s", s.sidecarLogSince(since))
	}
}

// waitedFor is the wait the sidecar's log states ("waited=..."), or "".
func waitedFor(log string) string {
	_, after, ok := strings.Cut(log, "launch agent answered; the session starts")
	if !ok {
		return ""
	}
	_, w, _ := strings.Cut(after, "waited=")
	return strings.Fields(w + " ")[0]
}

// liveSessionAtOnce is issue 25's measurement: the agent killed with its
// supervisor running (it restarts the agent after 1 s), and a session
// opened at once starts instead of being refused.
func liveSessionAtOnce(t *testing.T, s *liveStack) {
	since := time.Now()
	s.killAgent(t)
	start := time.Now()
	out, err := s.ssh(60*time.Second, "s-agent-at-once", false, "echo started-at-once")
	if err != nil || !strings.Contains(out, "started-at-once") {
		t.Fatalf("session opened at once after the agent was killed: %v\n%s\nsidecar:\n%s", err, out, s.sidecarLogSince(since))
	}
	t.Logf("session opened at once after the kill: ran after %v; the sidecar waited %q for the agent",
		time.Since(start).Round(10*time.Millisecond), waitedFor(s.sidecarLogSince(since)))
}

// liveSessionWaitsForAgent: a session opened at once after the agent was
// killed starts, within the bounded wait, once the supervisor restarts the
// agent; the supervisor is held until the sidecar's log shows the session
// waiting, so the session start certainly fell in the window.
func liveSessionWaitsForAgent(t *testing.T, s *liveStack) {
	since := time.Now()
	release := s.holdSupervisor(t)
	s.killAgent(t)
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := s.ssh(60*time.Second, "s-agent-wait", false, "echo started-after-the-restart")
		done <- result{out, err}
	}()
	waited := s.waitSidecarLog(t, since, "the session start waits for it", 4*time.Second)
	release()
	r := <-done
	if r.err != nil || !strings.Contains(r.out, "started-after-the-restart") {
		t.Fatalf("session opened while the agent restarted: %v\n%s\nsidecar:\n%s", r.err, r.out, s.sidecarLogSince(since))
	}
	log := s.sidecarLogSince(since)
	if !waited || waitedFor(log) == "" {
		t.Errorf("the session did not wait for the agent (or the log does not say so):\n%s", log)
	}
	t.Logf("with the supervisor held until the session waited: it waited %s", waitedFor(log))
	if !strings.Contains(log, "launch agent restarted: a new instance answers") {
		t.Errorf("the agent's restart is not in the sidecar's log:\n%s", log)
	}
}

// standInScript runs as root from a session: it holds the supervisor, kills
// the real agent and, once its socket is gone (its process stays a zombie
// while the held supervisor does not reap it), runs the agent's binary itself,
// detached, in its place. Started from the session, its loginuid is the
// session's, which it cannot change (no CAP_AUDIT_CONTROL): the sessions it
// starts get no audit session of their own.
const standInScript = `
pkill -STOP -f aptl-agent-supervise
setsid sh -c 'n=0; while ss -Hxl | grep -q " @aptl-launch-agent " && [ $n -lt 100 ]; do n=$((n+1)); sleep 0.1; done
	exec /opt/aptl-agent/aptl-launch-agent -users kali -peer-uid 0 -peer-gid 10001' </dev/null >/tmp/stand-in.log 2>&1 &
echo STAND-IN-STARTED
pkill -KILL -x aptl-launch-age
`

// liveStandInAgent: a program root started in the agent's place serves a
// session, whose record says its processes are unattributed; the sidecar
// logs the stand-in as a new instance.
func liveStandInAgent(t *testing.T, s *liveStack, id string) {
	since := time.Now()
	t.Cleanup(func() {
		// The stand-in goes, the supervisor starts the real agent again.
		run(t, 10*time.Second, nil, "docker", "exec", s.workload, "pkill", "-KILL", "-x", "aptl-launch-age")
		mustRun(t, 10*time.Second, nil, "docker", "exec", s.workload, "pkill", "-CONT", "-f", "aptl-agent-supervise")
		s.sessionWorks("after-stand-in", 30*time.Second)
	})
	encoded := base64.StdEncoding.EncodeToString([]byte(standInScript))
	// The session ends with its agent (launcher-lost); only its output matters.
	out, _ := s.ssh(time.Minute, "s-plant-stand-in", false, "sudo -n sh -c 'echo "+encoded+" | base64 -d | sh'")
	if !strings.Contains(out, "STAND-IN-STARTED") {
		t.Fatalf("stand-in not started:\n%s", out)
	}
	// Throwaway ids until the stand-in serves (a refused start uses its id up).
	t.Logf("the stand-in serves sessions %v after it was planted", s.sessionWorks("via-stand-in", 30*time.Second).Round(100*time.Millisecond))
	var agentLines []string
	for _, line := range strings.Split(s.sidecarLogSince(since), "\n") {
		if strings.Contains(line, "launch agent") || strings.Contains(line, "launch-failed") {
			agentLines = append(agentLines, line)
		}
	}
	standInLog, _ := run(t, 10*time.Second, nil, "docker", "exec", s.workload, "head", "-c", "2000", "/tmp/stand-in.log")
	t.Logf("the sidecar's agent lines since the stand-in was planted:\n%s\nthe stand-in's log:\n%s", strings.Join(agentLines, "\n"), standInLog)
	out, err := s.ssh(20*time.Second, id, false, "echo via-the-stand-in")
	if err != nil || !strings.Contains(out, "via-the-stand-in") {
		t.Fatalf("session through the stand-in: %v\n%s\nsidecar:\n%s", err, out, s.sidecarLogSince(since))
	}
	if log := s.sidecarLogSince(since); !strings.Contains(log, "launch agent restarted: a new instance answers") {
		t.Errorf("the stand-in's start is not in the sidecar's log:\n%s", log)
	}
	dir := s.harvest(id)
	vout, verr := s.verify(dir)
	if verr != nil || !strings.Contains(vout, "unattributed (no-audit-session)") {
		t.Errorf("verify of the stand-in's session: want ok with the unattributed note: %v\n%s", verr, vout)
	}
	if !strings.Contains(string(readHarvested(t, dir, "pty/integrity.jsonl")), `"type":"unattributed"`) {
		t.Errorf("the stand-in's session has no unattributed record")
	}
}
