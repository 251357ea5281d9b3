package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch/agentclient"
)

// goTool returns the go command's path: go test puts its own GOROOT/bin
// first on the test's PATH.
func goTool(tb testing.TB) string {
	tb.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("the go tool is needed to build the test binaries")
	}
	return gobin
}

// buildAgent returns cmd/aptl-launch-agent as the workload gets it:
// static (CGO_ENABLED=0), checked to have no ELF interpreter.
func buildAgent(tb testing.TB) string {
	tb.Helper()
	return built(tb, agentStatic)
}

// agentProc is a running aptl-launch-agent and what it logged.
type agentProc struct {
	cmd     *exec.Cmd
	termPID int // gets SIGTERM at cleanup; 0 means cmd's process
	logs    *testutil.LockedBuffer
	done    chan struct{} // closed when cmd.Wait returned
}

// startAgent runs argv (the agent, or a wrapper that execs it), whose agent
// listens on socket, and waits until a probe succeeds. At cleanup the agent
// gets SIGTERM, then SIGKILL; if the test process dies first, Pdeathsig
// ends it.
func startAgent(tb testing.TB, socket string, argv ...string) *agentProc {
	tb.Helper()
	ap := &agentProc{logs: &testutil.LockedBuffer{}, done: make(chan struct{})}
	ap.cmd = exec.Command(argv[0], argv[1:]...)
	ap.cmd.Stderr = ap.logs
	if err := testutil.StartWithDeathSignal(ap.cmd, syscall.SIGKILL); err != nil {
		tb.Fatalf("start agent: %v", err)
	}
	go func() {
		ap.cmd.Wait()
		close(ap.done)
	}()
	tb.Cleanup(func() { ap.stop(tb) })
	// Readiness only: the agent may run in this PID namespace or its own.
	a, err := agentclient.NewAgent(socket, agentclient.WithAgentUID(os.Geteuid()), agentclient.InsecureAllowAgentInSamePIDNS())
	if err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := a.Probe(ctx)
		cancel()
		if err == nil {
			return ap
		}
		select {
		case <-ap.done:
			tb.Fatalf("agent exited before it answered a probe (%v); its log:\n%s", err, ap.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("agent never answered a probe: %v; its log:\n%s", err, ap.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the agent: SIGTERM (it hangs up its sessions), then SIGKILL.
func (ap *agentProc) stop(tb testing.TB) {
	select {
	case <-ap.done:
		return
	default:
	}
	if ap.termPID != 0 {
		syscall.Kill(ap.termPID, syscall.SIGTERM)
	} else {
		ap.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-ap.done:
		return
	case <-time.After(10 * time.Second):
	}
	tb.Errorf("agent ignored SIGTERM for 10s; killing it")
	if ap.termPID != 0 {
		syscall.Kill(ap.termPID, syscall.SIGKILL)
	}
	ap.cmd.Process.Kill()
	<-ap.done
}

// testAgentUserFlags allow the agent to start sessions as the harness's
// login user, which is this process's user (root in CI, so the agent must
// also allow root), and to take this process, the sidecar, as its peer.
func testAgentUserFlags(tb testing.TB) []string {
	tb.Helper()
	u, err := user.Current()
	if err != nil {
		tb.Fatal(err)
	}
	flags := []string{"-users", u.Username, "-peer-uid", strconv.Itoa(os.Geteuid()), "-peer-gid", strconv.Itoa(os.Getegid())}
	if u.Uid == "0" {
		flags = append(flags, "-allow-root")
	}
	return flags
}

// childPIDs returns the children of pid, from /proc/<pid>/task/*/children.
func childPIDs(tb testing.TB, pid int) []int {
	tb.Helper()
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// agentLogHas reports whether any JSON log line of the agent has msg.
func agentLogHas(logs, msg string) bool {
	return strings.Contains(logs, `"msg":"`+msg+`"`)
}

var errNoAgentChild = errors.New("the agent has no child")

// onlyChild returns the agent's one child (a session leader).
func onlyChild(tb testing.TB, pid int) (int, error) {
	tb.Helper()
	kids := childPIDs(tb, pid)
	switch len(kids) {
	case 0:
		return 0, errNoAgentChild
	case 1:
		return kids[0], nil
	}
	return 0, fmt.Errorf("the agent has %d children: %v", len(kids), kids)
}

// noCanary fails if s holds canary.
func noCanary(tb testing.TB, where, s, canary string) {
	tb.Helper()
	if bytes.Contains([]byte(s), []byte(canary)) {
		tb.Errorf("%s contains the canary %q", where, canary)
	}
}
