package tests

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// TestAgentReadiness runs the sidecar binary with the agent adapter before
// the agent exists: readiness says launch=degraded, health fails, and a
// session is refused with a clear error and a record, never run unrecorded.
// Once the agent listens, readiness turns ok and sessions run in it.
func TestAgentReadiness(t *testing.T) {
	t.Parallel() // see parallel_test.go
	bin, agentBin := buildForLiveTest(t), buildAgent(t)
	work := t.TempDir()
	socket := fmt.Sprintf("@aptl-test-ready-%d", time.Now().UnixNano())
	ready := filepath.Join(work, "ready")
	_, sshArgs, _ := startServe(t, bin, work, "--launch", "agent", "--agent-socket", socket,
		"--insecure-agent-same-pidns", "--agent-uid", strconv.Itoa(os.Geteuid()),
		"--agent-probe-interval", "100ms", "--ready-file", ready,
		// The refusal is under test here, not the wait before it (agentd's
		// restart test holds a session start through a restart).
		"--agent-wait", "500ms")
	listen := sshArgs[1] // the printed command starts "ssh -p PORT"
	health := func() error {
		return exec.Command(bin, "health", "--ready-file", ready, "--listen", "127.0.0.1:"+listen).Run()
	}
	waitFor(t, 10*time.Second, "launch=degraded", func() bool {
		b, _ := os.ReadFile(ready)
		return strings.Contains(string(b), "launch=degraded")
	})
	if health() == nil {
		t.Error("health passed while the agent is unreachable")
	}
	// A raw channel reads the refusal's stderr line reliably; OpenSSH may
	// exit on the failed request before printing it.
	res := rawExec(t, dialServe(t, work, listen), nil, "echo SHOULD_NOT_RUN")
	if !res.refused() || res.stdout != "" || !strings.Contains(res.stderr, "launch agent in the workload is unreachable") {
		t.Fatalf("session while the agent is down: %+v", res)
	}
	refused, _ := filepath.Glob(filepath.Join(work, "aptl-dev", "captures", "_unbound", "anon-*"))
	if len(refused) != 1 || !strings.Contains(string(mustRead(t, filepath.Join(refused[0], "pty", "timing"))), "APTL_CLOSE_REASON launch-failed") {
		t.Errorf("the refused session left no record saying so: %v", refused)
	}

	startAgent(t, socket, append([]string{agentBin, "-socket", socket, "-insecure-allow-same-pidns"}, testAgentUserFlags(t)...)...)
	waitFor(t, 10*time.Second, "launch=ok", func() bool {
		b, _ := os.ReadFile(ready)
		return strings.Contains(string(b), "launch=ok")
	})
	if err := health(); err != nil {
		t.Errorf("health failed with the agent up: %v", err)
	}
	out, err := exec.Command("ssh", append(sshArgs, "-o", "BatchMode=yes", "echo RAN_$((6*7))")...).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "RAN_42" {
		t.Fatalf("session with the agent up: %v\n%s", err, out)
	}
}

// dialServe logs in to a serve process started in work with its newcomer
// client key, pinning its host key.
func dialServe(t *testing.T, work, port string) *gossh.Client {
	t.Helper()
	state := filepath.Join(work, "aptl-dev", "state")
	signer, err := gossh.ParsePrivateKey(mustRead(t, filepath.Join(state, "client_ed25519")))
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	c, err := gossh.Dial("tcp", "127.0.0.1:"+port, &gossh.ClientConfig{
		User: u.Username, Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.FixedHostKey(readHostKey(t, state)), Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
