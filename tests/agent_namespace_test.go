package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/agentclient"
)

// nsAgentScript runs as PID 1 of the agent's new PID and mount namespaces,
// then execs the agent. It builds the workload's view: the harness's
// directory (capture root, host key, client key) hidden under an empty
// tmpfs, and a devpts instance of its own, as a workload container has. It
// also ignores SIGINT and SIGQUIT, as a starter using `cmd &` does; the
// agent must not pass that on to sessions, where ^C would then do nothing
// (launch/login/sigdisp_linux.go).
const nsAgentScript = `set -e
hide=$1; shift
mount -t tmpfs -o size=64k,mode=0700 aptl-hidden "$hide"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts
mount --bind /dev/pts/ptmx /dev/ptmx
trap '' INT QUIT
exec "$@"`

// nsAgent is the agent in its namespaces, as the sidecar sees it.
type nsAgent struct {
	*agentProc
	pid int // the agent's pid in this (the sidecar's) PID namespace
}

// startNSAgent starts aptl-launch-agent under unshare(1) (util-linux) in
// new PID and mount namespaces, sharing only the network namespace (the
// abstract socket lives there), with hide hidden.
func startNSAgent(t *testing.T, bin, socket, hide string) *nsAgent {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) not installed")
	}
	userFlags := testAgentUserFlags(t)
	argv := append([]string{"unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private",
		"sh", "-c", nsAgentScript, "sh", hide, bin, "-socket", socket, "-log-level", "debug"}, userFlags...)
	ap := startAgent(t, socket, argv...)
	var pid int
	waitFor(t, 5*time.Second, "the agent under unshare", func() bool {
		kids := childPIDs(t, ap.cmd.Process.Pid)
		if len(kids) == 1 {
			pid = kids[0]
		}
		return pid != 0
	})
	// SIGTERM goes to the agent itself: unshare blocks it while it waits.
	ap.termPID = pid
	return &nsAgent{agentProc: ap, pid: pid}
}

// TestAgentNamespaceIsolation runs the agent the way a deployment does: in
// a PID and mount namespace of its own whose filesystem view lacks the
// capture root, with this process (the sidecar, with the in-process broker)
// outside. It proves from a root shell in a recorded session what the
// workload can and cannot see, that terminal semantics survive the
// boundary, and how each kind of death ends the session.
func TestAgentNamespaceIsolation(t *testing.T) {
	t.Parallel() // see parallel_test.go
	if os.Geteuid() != 0 {
		t.Skip("needs root: unshare --pid --mount and the mounts of the workload's view")
	}
	if testing.Short() {
		t.Skip("namespace end-to-end test skipped in -short mode")
	}
	bin := buildAgent(t)
	socket := fmt.Sprintf("@aptl-test-ns-%d-%d", os.Getpid(), time.Now().UnixNano())
	// No development option: the agent is outside this PID namespace, as
	// in a deployment, and the sidecar checks that.
	// A short unreachable wait: "kill the agent" tests the refusal after
	// the agent died, not the wait before it (agentd's restart test holds
	// a session start through a restart).
	agent, err := agentclient.NewAgent(socket, agentclient.WithAgentUID(os.Geteuid()), agentclient.WithUnreachableWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, withLauncher(func(launch.Launcher) launch.Launcher { return agent }))
	ns := startNSAgent(t, bin, socket, filepath.Dir(h.root))
	// Its log arrives through a pipe: wait for the line rather than read once.
	waitFor(t, 5*time.Second, "the agent's log saying it is PID 1 and reaps orphans", func() bool {
		return agentLogHas(ns.logs.String(), "reaping orphans: the agent is PID 1 of its namespace")
	})

	t.Run("workload view", func(t *testing.T) { nsWorkloadView(t, h) })
	t.Run("terminal semantics", func(t *testing.T) { nsTerminalSemantics(t, h, ns) })
	t.Run("default signal dispositions", func(t *testing.T) { nsSignalDispositions(t, h) })
	t.Run("audit session", func(t *testing.T) { nsAuditSession(t, h, ns) })
	t.Run("kill the shell", func(t *testing.T) { nsKillShell(t, h) })
	t.Run("kill the process group", func(t *testing.T) { nsKillGroup(t, h, ns) })
	t.Run("kill the agent", func(t *testing.T) { nsKillAgent(t, h, ns, agent) })
	if t.Failed() {
		t.Logf("agent log:\n%s\nbroker log:\n%s", ns.logs.String(), h.logs.String())
	}
}

// nsWorkloadView checks, from a root shell in the workload, that the
// capture root and the sidecar are out of reach, while the terminal works.
func nsWorkloadView(t *testing.T, h *harness) {
	ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "ns-view", "APTL_RUN_ID": "ns-run", "APTL_TRACE_ID": "tr-1"}, 24, 80)
	hdir := filepath.Dir(h.root)
	// Every marker is built by the shell ($(...)), so the echo of the typed
	// line cannot match it.
	ss.send("echo \"IDS=$APTL_SESSION_ID:$APTL_RUN_ID:$APTL_TRACE_ID ID_$(id -u)\"\n")
	ss.waitOutput(regexp.MustCompile(`IDS=ns-view:ns-run:tr-1 ID_0\r\n`))
	ss.send(fmt.Sprintf("echo \"ROOT_$(test -e %s && echo PRESENT || echo ABSENT) HDIR_$(ls -A %s | wc -l)\"\n", h.root, hdir))
	ss.waitOutput(regexp.MustCompile(`ROOT_ABSENT HDIR_0\r\n`))
	ss.send("echo \"PID1_$(cat /proc/1/comm) COMMS_$(cat /proc/[0-9]*/comm | sort -u | tr '\\n' ,)END\"\n")
	out := ss.waitOutput(regexp.MustCompile(`COMMS_([^\r]*)END\r\n`))
	if !strings.Contains(out, "PID1_aptl-launch-age ") {
		t.Errorf("PID 1 of the workload is not the agent")
	}
	comms := regexp.MustCompile(`COMMS_([^\r]*)END\r\n`).FindStringSubmatch(out)[1]
	for _, c := range strings.Split(strings.TrimSuffix(comms, ","), ",") {
		switch c {
		case "aptl-launch-age", "bash", "cat", "sort", "tr":
		default:
			t.Errorf("the workload sees process %q: only the agent and the session belong there", c)
		}
	}
	// No process in the workload holds a PTY master, and the agent holds no
	// terminal at all once the shell started.
	// (A foreign devpts slave still reads as /dev/pts/N in /proc/*/fd.)
	ss.send("echo \"PTMX_$(find /proc/[0-9]*/fd -lname '*ptmx*' 2>/dev/null | wc -l) AGENTTTY_$(find /proc/1/fd -lname '*pts*' 2>/dev/null | wc -l)\"\n")
	ss.waitOutput(regexp.MustCompile(`PTMX_0 AGENTTTY_0\r\n`))
	// The slave is the sidecar's devpts: a terminal, but nameless here.
	ss.send("tty; echo \"TTYRC_$? ISATTY_$(test -t 0 && echo yes) PTS_$(ls /dev/pts | tr '\\n' ,)\"\n")
	ss.waitOutput(regexp.MustCompile(`not a tty\r\nTTYRC_1 ISATTY_yes PTS_ptmx,\r\n`))
	ss.send("echo \"TTYW_$((6*7))\" > /dev/tty\n")
	ss.waitOutput(regexp.MustCompile(`TTYW_42\r\n`))
	ss.send("exit 0\n")
	if err := ss.finish(); err != nil {
		t.Fatalf("session ended with %v", err)
	}
	h.waitIdle(t)
	dir := h.sessionDir("ns-run", "ns-view")
	if got := replay(t, dir, "out"); !bytes.Equal(got, []byte(ss.received.String())) {
		t.Errorf("recorded output differs from what the client received, at byte %d", firstDiff(got, []byte(ss.received.String())))
	}
	hdr := timingHeaders(t, dir)
	for k, v := range map[string]string{"APTL_ADAPTER": "agent", "APTL_RUN_AS": "root", "APTL_CLOSE_REASON": "shell-exited"} {
		if hdr[k] != v {
			t.Errorf("timing header %s = %q, want %q", k, hdr[k], v)
		}
	}
}

// nsTerminalSemantics is TestTerminalSemantics across the namespace
// boundary, plus non-echoed input.
func nsTerminalSemantics(t *testing.T, h *harness, ns *nsAgent) {
	ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "ns-term"}, 24, 80)
	if err := ss.s.WindowChange(50, 132); err != nil {
		t.Fatal(err)
	}
	ss.send("echo \"SIZE=$(stty size)\"\n")
	ss.waitOutput(regexp.MustCompile(`SIZE=50 132\r\n`))
	// SLEEPING is printed by the foreground job, so the ^C cannot reach
	// bash before the job owns the terminal.
	ss.send("sh -c 'echo SLEEPING; exec sleep 300'; echo NOT_INTERRUPTED\n")
	ss.waitOutput(regexp.MustCompile(`SLEEPING\r\n`))
	ss.send("\x03")
	ss.send("echo \"ALIVE_$((1+1))\"\n")
	if out := ss.waitOutput(regexp.MustCompile(`ALIVE_2\r\n`)); strings.Contains(out, "\nNOT_INTERRUPTED\r\n") {
		t.Error("^C did not interrupt the foreground job")
	}
	ss.send("sleep 100 & jobs; kill %1; wait; echo \"JOBS_$((2+3))\"\n")
	if out := ss.waitOutput(regexp.MustCompile(`JOBS_5\r\n`)); !regexp.MustCompile(`\[1\]\+ +Running +sleep 100 &`).MatchString(out) {
		t.Error("job control: no running job listed")
	}
	const secret = "ns-secret-not-echoed"
	ss.send("read -s -p \"PROMPT_$((3+4))\" S; echo; echo \"LEN=${#S}\"\n")
	ss.waitOutput(regexp.MustCompile(`PROMPT_7`))
	ss.send(secret + "\n")
	ss.waitOutput(regexp.MustCompile(fmt.Sprintf(`LEN=%d\r\n`, len(secret))))
	ss.send("exit 7\n")
	var ee *gossh.ExitError
	if err := ss.finish(); !errors.As(err, &ee) || ee.ExitStatus() != 7 {
		t.Fatalf("session ended with %v, want exit status 7", err)
	}
	h.waitIdle(t)
	dir := h.sessionDir("_unbound", "ns-term")
	if strings.Contains(ss.received.String(), secret) {
		t.Error("the non-echoed secret reached the client's output")
	}
	if got := replay(t, dir, "in"); !bytes.Equal(got, ss.sent.Bytes()) || !bytes.Contains(got, []byte(secret)) {
		t.Errorf("recorded input differs from what the client sent, at byte %d", firstDiff(got, ss.sent.Bytes()))
	}
	if got := replay(t, dir, "out"); !bytes.Equal(got, []byte(ss.received.String())) {
		t.Errorf("recorded output differs from what the client received, at byte %d", firstDiff(got, []byte(ss.received.String())))
	}
	if hdr := timingHeaders(t, dir); hdr["EXIT_CODE"] != "7" || hdr["APTL_CLOSE_REASON"] != "shell-exited" {
		t.Errorf("record headers = %v", hdr)
	}
	noCanary(t, "the agent's log", ns.logs.String(), secret)
	noCanary(t, "the agent's log", ns.logs.String(), "exec sleep 300")
}

// nsSignalDispositions: the agent's starter ignored SIGINT and SIGQUIT;
// a session process must still start with no signal ignored or blocked.
func nsSignalDispositions(t *testing.T, h *harness) {
	res := rawExec(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "ns-sig"}, "grep -E '^Sig(Blk|Ign):' /proc/self/status")
	if want := "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"; res.stdout != want || res.status != 0 {
		t.Errorf("session process signal state %q (status %d), want %q", res.stdout, res.status, want)
	}
}

func nsKillShell(t *testing.T, h *harness) {
	ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "ns-kill-shell"}, 24, 80)
	ss.send("echo \"READY_$((1+2))\"; kill -KILL $$\n")
	var ee *gossh.ExitError
	if err := ss.finish(); !errors.As(err, &ee) || ee.Signal() != "KILL" {
		t.Fatalf("session ended with %v, want exit-signal KILL", err)
	}
	h.waitIdle(t)
	hdr := timingHeaders(t, h.sessionDir("_unbound", "ns-kill-shell"))
	if hdr["APTL_CLOSE_REASON"] != "shell-exited" || hdr["EXIT_CODE"] != "137" || hdr["APTL_EXIT_SIGNAL"] != "KILL" {
		t.Errorf("record headers = %v", hdr)
	}
}

// nsKillGroup kills the session's process group from outside the
// workload, while a foreground job runs.
func nsKillGroup(t *testing.T, h *harness, ns *nsAgent) {
	ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "ns-kill-group"}, 24, 80)
	ss.send("sh -c 'echo \"BUSY_$((2+2))\"; exec sleep 300'\n")
	ss.waitOutput(regexp.MustCompile(`BUSY_4\r\n`))
	leader, err := onlyChild(t, ns.pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-leader, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var ee *gossh.ExitError
	if err := ss.finish(); !errors.As(err, &ee) || ee.Signal() != "KILL" {
		t.Fatalf("session ended with %v, want exit-signal KILL", err)
	}
	h.waitIdle(t)
	hdr := timingHeaders(t, h.sessionDir("_unbound", "ns-kill-group"))
	if hdr["APTL_CLOSE_REASON"] != "shell-exited" || hdr["EXIT_CODE"] != "137" {
		t.Errorf("record headers = %v", hdr)
	}
	// The foreground job got SIGHUP when its session leader died.
	waitFor(t, 10*time.Second, "the session's processes gone", func() bool { return len(childPIDs(t, ns.pid)) == 0 })
}

// nsKillAgent kills the agent (and with it its PID namespace) under a live
// session: the session ends as launcher-lost with status 255, readiness
// turns degraded, and a new session is refused with a record that says so.
func nsKillAgent(t *testing.T, h *harness, ns *nsAgent, agent *agentclient.Agent) {
	ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "ns-kill-agent"}, 24, 80)
	ss.send("echo \"READY_$((4+4))\"\n")
	ss.waitOutput(regexp.MustCompile(`READY_8\r\n`))
	if err := syscall.Kill(ns.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var ee *gossh.ExitError
	if err := ss.finish(); !errors.As(err, &ee) || ee.ExitStatus() != 255 {
		t.Fatalf("session ended with %v, want exit status 255", err)
	}
	if !strings.Contains(ss.stderr.String(), "lost the session process") {
		t.Errorf("client stderr %q does not say the session process was lost", ss.stderr.String())
	}
	h.waitIdle(t)
	hdr := timingHeaders(t, h.sessionDir("_unbound", "ns-kill-agent"))
	if hdr["APTL_CLOSE_REASON"] != "launcher-lost" || hdr["EXIT_CODE"] != "255" {
		t.Errorf("record headers = %v", hdr)
	}
	if !strings.Contains(h.logs.String(), "reason=launcher-lost") {
		t.Error("the broker log does not say the launcher was lost")
	}
	<-ns.done

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := agent.Probe(ctx); !errors.Is(err, launch.ErrAgentUnreachable) {
		t.Errorf("Probe after the agent died = %v, want ErrAgentUnreachable", err)
	}
	res := rawExec(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "ns-no-agent"}, "echo SHOULD_NOT_RUN")
	if !res.refused() || !strings.Contains(res.stderr, "could not start the session process") {
		t.Errorf("session without an agent: %+v, want refused with a reason", res)
	}
	h.waitIdle(t)
	if r := timingHeaders(t, h.sessionDir("_unbound", "ns-no-agent"))["APTL_CLOSE_REASON"]; r != "launch-failed" {
		t.Errorf("close reason = %q, want launch-failed", r)
	}
}
