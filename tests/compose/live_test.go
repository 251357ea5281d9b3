package compose

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLiveCompose builds the pair from local material, brings it up under a
// unique project name and proves the boundary from a root shell in the real
// workload, then the faults: agent killed, shell killed, sidecar SIGKILLed
// mid-session and started again. Harvested records are verified.
func TestLiveCompose(t *testing.T) {
	requireDocker(t)
	start := time.Now()
	s := startStack(t)
	t.Logf("built and healthy in %v", time.Since(start).Round(time.Second))

	out, err := s.ssh(30*time.Second, "s-ok", false, "id -un; sudo -n true && echo sudo-ok")
	if err != nil || !strings.Contains(out, "kali") || !strings.Contains(out, "sudo-ok") {
		t.Fatalf("stock ssh session: %v\n%s", err, out)
	}
	t.Run("node ssh2", func(t *testing.T) { liveNodeSession(t, s) })
	t.Run("root in the workload sees no record", func(t *testing.T) { liveRootBoundary(t, s) })
	t.Run("witness capabilities", func(t *testing.T) { liveWitnessCaps(t, s) })
	t.Run("audit capabilities inert in the sidecar", func(t *testing.T) { liveAuditInertInSidecar(t, s) })
	t.Run("agent refuses root in the workload", func(t *testing.T) { liveAgentRefusesWorkloadRoot(t, s) })
	t.Run("pcap session", func(t *testing.T) { livePcapSession(t, s) })
	t.Run("audit session", func(t *testing.T) { liveAuditSession(t, s) })
	t.Run("relay privileges", func(t *testing.T) { liveRelayPrivileges(t, s) })
	t.Run("io_uring refused to the workload", func(t *testing.T) { liveURingRefused(t, s) })
	t.Run("workload root cannot blind the audit witness", func(t *testing.T) { liveWorkloadRootCannotBlindAudit(t, s) })
	t.Run("exec flood", func(t *testing.T) { liveExecFlood(t, s, 4, 1000) })
	t.Run("relay killed mid-session", func(t *testing.T) { liveRelayKilled(t, s) })
	liveAgentRestarts(t, s)

	agentKilled := liveKillAgent(t, s)
	shellKilled := liveKillShell(t, s)
	sidecarKilled := liveKillSidecar(t, s)

	t.Run("used session id refused after restart", func(t *testing.T) {
		out, err := s.ssh(20*time.Second, "s-ok", false, "echo should-not-run")
		if err == nil || strings.Contains(out, "should-not-run") {
			t.Fatalf("reused session id s-ok ran after the restart: %v\n%s", err, out)
		}
	})
	// Not a subtest: the stack's helpers fail the parent test.
	liveHarvest(t, s, []string{"s-ok", agentKilled, shellKilled}, sidecarKilled)
	t.Run("the README's harvest as written", func(t *testing.T) { liveReadmeHarvest(t, s) })
	t.Run("pcap record", func(t *testing.T) { livePcapRecord(t, s) })
	t.Logf("live suite ran in %v", time.Since(start).Round(time.Second))
}

func liveNodeSession(t *testing.T, s *liveStack) {
	out, err := s.node("s-node", strings.Fields(s.hostKey)[1], "echo from-ssh2")
	if errors.Is(err, errNoNode) {
		t.Skip(err.Error())
	}
	if err != nil || !strings.Contains(out, `"ok":true`) || !strings.Contains(out, "from-ssh2") {
		t.Fatalf("node ssh2 session: %v\n%s", err, out)
	}
}

var errNoNode = errors.New("node or APTL_SSH2_NODE_MODULES (node_modules holding ssh2 1.17) missing")

// node runs one session with the tool servers' client, node ssh2
// (tests/node/connect.js); hostKey is the pinned key blob, or "unpinned".
func (s *liveStack) node(session, hostKey, command string) (string, error) {
	modules := os.Getenv("APTL_SSH2_NODE_MODULES")
	node, err := exec.LookPath("node")
	if err != nil || modules == "" {
		return "", errNoNode
	}
	opts, _ := json.Marshal(map[string]any{
		"host": "127.0.0.1", "port": s.port, "username": "kali",
		"privateKeyPath": filepath.Join(s.dir, "client"),
		"hostKey":        hostKey,
		"env":            map[string]string{"APTL_SESSION_ID": session, "APTL_RUN_ID": liveRunID},
		"command":        command,
	})
	return run(s.t, 60*time.Second, []string{"NODE_PATH=" + modules, "APTL_SSH2_CONNECT=" + string(opts)},
		node, repoFile(s.t, "tests/node/connect.js"))
}

// rootProbe runs as root (sudo su -) in the workload and prints one line per
// finding; an empty report is the boundary holding.
const rootProbe = `
for p in /var/log/aptl /var/lib/aptl-kali-capture; do test -e "$p" && echo "EXISTS $p"; done
find / -name typescript 2>/dev/null | sed 's/^/TYPESCRIPT /'
ps -eo comm= | grep -i capture | sed 's/^/PS /'
grep -l "aptl-kali-captur[e]" /proc/[0-9]*/cmdline 2>/dev/null | sed 's/^/PROC /'
ss -Htlnu | awk '{print $5}' | grep -v -x -e '\*:2222' -e '0.0.0.0:2222' -e '127.0.0.11:[0-9]*' | sed 's/^/LISTEN /'
ss -Hxl | awk '{print $5}' | grep -v -x '@aptl-launch-agent' | sed 's/^/UNIX /'
echo PROBE-DONE
`

func liveRootBoundary(t *testing.T, s *liveStack) {
	// base64 carries the script through ssh's and su's shells unchanged.
	encoded := base64.StdEncoding.EncodeToString([]byte(rootProbe))
	out, err := s.ssh(2*time.Minute, "s-root", false, "sudo su - -c 'echo "+encoded+" | base64 -d | bash'")
	if err != nil || !strings.Contains(out, "PROBE-DONE") {
		t.Fatalf("root probe did not run: %v\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		for _, bad := range []string{"EXISTS ", "TYPESCRIPT ", "PS ", "PROC ", "LISTEN ", "UNIX "} {
			if strings.HasPrefix(line, bad) {
				t.Errorf("root in the workload: %s", line)
			}
		}
	}
}

// background starts a session that stays open, and returns its wait channel.
func (s *liveStack) background(session, command string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.ssh(90*time.Second, session, true, command)
		done <- err
	}()
	return done
}

// waitInWorkload polls until pgrep finds pattern in the workload.
func (s *liveStack) waitInWorkload(pattern string) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := run(s.t, 10*time.Second, nil, "docker", "exec", s.workload, "pgrep", "-f", pattern); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
	}
	s.t.Fatalf("%q never ran in the workload", pattern)
}

func waitClosed(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: the client session did not end", what)
	}
}

func liveKillAgent(t *testing.T, s *liveStack) string {
	const id = "s-agent-killed"
	done := s.background(id, "sleep 61")
	s.waitInWorkload("sleep 61")
	mustRun(t, 10*time.Second, nil, "docker", "exec", s.workload, "pkill", "-KILL", "-x", "aptl-launch-age")
	waitClosed(t, done, "agent killed")
	t.Logf("agent killed: sessions again after %v", s.sessionWorks("after-agent", 30*time.Second).Round(100*time.Millisecond))
	return id
}

func liveKillShell(t *testing.T, s *liveStack) string {
	const id = "s-shell-killed"
	done := s.background(id, "sleep 62")
	s.waitInWorkload("sleep 62")
	mustRun(t, 10*time.Second, nil, "docker", "exec", s.workload, "pkill", "-KILL", "-f", "sleep 62")
	waitClosed(t, done, "shell killed")
	return id
}

func liveKillSidecar(t *testing.T, s *liveStack) string {
	const id = "s-sidecar-killed"
	done := s.background(id, "sleep 63")
	s.waitInWorkload("sleep 63")
	mustRun(t, 20*time.Second, nil, "docker", "kill", "-s", "KILL", sidecarName)
	waitClosed(t, done, "sidecar killed")
	mustRun(t, 30*time.Second, nil, "docker", "start", sidecarName)
	t.Logf("sidecar SIGKILL + start: sessions again after %v", s.sessionWorks("after-sidecar", 45*time.Second).Round(100*time.Millisecond))
	return id
}

func liveHarvest(t *testing.T, s *liveStack, finalized []string, killed string) {
	var dirs []string
	for _, id := range finalized {
		dirs = append(dirs, s.harvest(id))
	}
	if out, err := s.verify(dirs...); err != nil {
		t.Errorf("verify of the finalized sessions: %v\n%s", err, out)
	}
	if r := timingHeader(t, dirs[1], "APTL_CLOSE_REASON"); r != "launcher-lost" {
		t.Errorf("agent-killed session closed with %q, want launcher-lost", r)
	}
	if sig := timingHeader(t, dirs[2], "APTL_EXIT_SIGNAL"); sig == "" {
		t.Errorf("shell-killed session records no exit signal")
	}
	dir := s.harvest(killed)
	out, err := s.verify(dir)
	if err == nil || !strings.Contains(out, "unfinalized") {
		t.Errorf("verify of the sidecar-killed session: want unfinalized, got %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "pty", "recovery.jsonl")); err != nil {
		t.Errorf("sidecar-killed session has no recovery statement: %v", err)
	}
}
