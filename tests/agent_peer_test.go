package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch/agentclient"
)

// nobodyID is the uid and gid the untrusted clients run as (Debian's nobody).
const nobodyID = 65534

// peerTestAgent is the real agent as deployed (PID 1 of its own PID
// namespace, no development option), this process's adapter trusted by it,
// and the hand-written wire client (tests/clients/wireclient) that plays
// everyone else.
type peerTestAgent struct {
	ns     *nsAgent
	socket string
	agent  *agentclient.Agent
	client string // the wireclient binary, executable by nobody
}

func startPeerTestAgent(t *testing.T) *peerTestAgent {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent runs in a PID namespace of its own, and the clients as uid 65534")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("nsenter (util-linux) not installed")
	}
	bin := buildAgent(t)
	client := buildWireClient(t)
	socket := fmt.Sprintf("@aptl-test-peer-%d-%d", os.Getpid(), time.Now().UnixNano())
	agent, err := agentclient.NewAgent(socket, agentclient.WithAgentUID(os.Geteuid()))
	if err != nil {
		t.Fatal(err)
	}
	ns := startNSAgent(t, bin, socket, t.TempDir())
	return &peerTestAgent{ns: ns, socket: socket, agent: agent, client: client}
}

// buildWireClient returns the wire client, static, in a folder that uid
// 65534 may enter (the test's temp dirs are 0700; the shared builds' are
// not).
func buildWireClient(t *testing.T) string {
	t.Helper()
	return built(t, wireClientBuild)
}

// clientCmd runs the wire client as uid and gid 65534 with no groups; in
// the workload (inWorkload) it runs inside the agent's PID namespace too,
// entered by nsenter(1) as root, which then drops to 65534. A long-lived
// one is started with testutil.StartWithDeathSignal.
func (pa *peerTestAgent) clientCmd(inWorkload bool, args ...string) *exec.Cmd {
	id := strconv.Itoa(nobodyID)
	if inWorkload {
		argv := append([]string{"--target", strconv.Itoa(pa.ns.pid), "--pid", "--setuid", id, "--setgid", id, "--", pa.client}, args...)
		return exec.Command("nsenter", argv...)
	}
	cmd := exec.Command(pa.client, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: nobodyID, Gid: nobodyID, Groups: []uint32{}},
	}
	return cmd
}

// TestAgentRefusesUntrustedPeers replays the attack: a process that is not
// the sidecar (uid 65534, outside the agent's PID namespace as a sidecar
// process or another container would be, or inside it as a workload
// process) speaks the documented protocol to the abstract socket and asks
// for a session. It gets no reply, nothing starts, and the agent's log
// holds the refusal with the peer's uid.
func TestAgentRefusesUntrustedPeers(t *testing.T) {
	pa := startPeerTestAgent(t)
	user := testAgentUserFlags(t)[1] // the user the agent allows: root here
	for _, tt := range []struct {
		name       string
		inWorkload bool
	}{
		{"outside the agent's PID namespace", false},
		{"in the workload", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(agentRefusals(t, pa.ns.logs.String()))
			out, err := pa.clientCmd(tt.inWorkload, "spawn", pa.socket, user).Output()
			if err != nil {
				t.Fatalf("wire client: %v", err)
			}
			if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, "closed") {
				t.Errorf("uid %d got %q from the agent, want the connection closed without a reply", nobodyID, got)
			}
			waitFor(t, 5*time.Second, "the refusal in the agent's log", func() bool {
				return len(agentRefusals(t, pa.ns.logs.String())) > before
			})
			r := agentRefusals(t, pa.ns.logs.String())[before]
			if r["peer_uid"] != float64(nobodyID) || !strings.Contains(fmt.Sprint(r["reason"]), "uid 65534 gid 65534") {
				t.Errorf("refusal logged as %v, want peer uid %d named", r, nobodyID)
			}
		})
	}
	if logs := pa.ns.logs.String(); agentLogHas(logs, "session started") {
		t.Errorf("the agent started a session for an untrusted peer: %s", logs)
	}
	if kids := childPIDs(t, pa.ns.pid); len(kids) != 0 {
		t.Errorf("the agent has children %v", kids)
	}
	// The sidecar's own adapter is still served.
	if err := pa.agent.Probe(context.Background()); err != nil {
		t.Errorf("the sidecar's probe: %v", err)
	}
}

// agentRefusals returns the agent's "connection refused" log records.
func agentRefusals(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, rec := range agentLogRecords(t, logs) {
		if rec["msg"] == "connection refused" {
			out = append(out, rec)
		}
	}
	return out
}

// agentLogRecords parses the agent's JSON log lines.
func agentLogRecords(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			continue // a line cut by the pipe; checkAgentLog checks the format
		}
		recs = append(recs, rec)
	}
	return recs
}

// flooder is one running wire client in flood mode.
type flooder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	stderr *testutil.LockedBuffer
}

func (pa *peerTestAgent) startFlooder(t *testing.T, inWorkload bool, hold int) *flooder {
	t.Helper()
	cmd := pa.clientCmd(inWorkload, "flood", pa.socket, strconv.Itoa(hold))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testutil.LockedBuffer{}
	cmd.Stderr = stderr
	if err := testutil.StartWithDeathSignal(cmd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f := &flooder{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout), stderr: stderr}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	if !f.out.Scan() || f.out.Text() != "flooding" {
		t.Fatalf("flooder did not start: %q %v; stderr %s", f.out.Text(), f.out.Err(), stderr.String())
	}
	return f
}

// stop ends the flood and returns how many connections it made.
func (f *flooder) stop(t *testing.T) int {
	t.Helper()
	f.stdin.Close()
	var connects, failures int
	if !f.out.Scan() {
		t.Fatalf("flooder ended without its counts: %v; stderr %s", f.out.Err(), f.stderr.String())
	}
	if _, err := fmt.Sscanf(f.out.Text(), "connects %d failures %d", &connects, &failures); err != nil {
		t.Fatalf("flooder said %q: %v", f.out.Text(), err)
	}
	if err := f.cmd.Wait(); err != nil {
		t.Errorf("flooder: %v", err)
	}
	return connects
}
