package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// pythonBin is Debian's interpreter: python3-paramiko and python3-asyncssh
// install into its dist-packages, which a pyenv or venv python3 earlier on
// PATH does not see.
const pythonBin = "/usr/bin/python3"

// pythonFlags keep the run to Debian's packages and the repo clean: -B
// writes no __pycache__ into tests/clients, -E ignores PYTHON* variables,
// -s ignores the user's site-packages.
var pythonFlags = []string{"-B", "-E", "-s"}

// The session the scripts in tests/clients drive (clientlib.py holds their
// side of this contract).
const (
	pyRunID    = "python"
	pyCommands = 50
	pyExitCmd  = "exit 3\n"
)

var (
	pyBodies = []string{"true", "false", "(exit 3)"}
	pyCodes  = []string{"0", "1", "3"}
)

// pythonSummary is the JSON a client script prints on stdout.
type pythonSummary struct {
	Client         string   `json:"client"`
	ShellExit      int      `json:"shell_exit"`
	ShellStderr    string   `json:"shell_stderr"`
	ExecExit       int      `json:"exec_exit"`
	ExecStdout     string   `json:"exec_stdout"`
	ExecStderr     string   `json:"exec_stderr"`
	MarkersInOrder bool     `json:"markers_in_order"`
	SttySize       *string  `json:"stty_size"`
	Errors         []string `json:"errors"`
}

// TestPythonClients drives the broker with paramiko and asyncssh, which must
// work the same way as stock OpenSSH ssh (docs/OPERATING.md, "Behaviour a client can
// rely on"). Each client, over one connection, runs a PTY shell with a window
// change and 50 back-to-back delimited commands, and an exec session
// without a PTY; the record must replay to exactly the bytes it exchanged.
func TestPythonClients(t *testing.T) {
	t.Parallel() // see parallel_test.go
	testPythonClients(t)
}

// testPythonClients is TestPythonClients with extra harness options (agent_suites_test.go runs it
// with the agent adapter).
func testPythonClients(t *testing.T, opts ...harnessOption) {
	for _, tc := range []struct{ module, script string }{
		{"paramiko", "paramiko_session.py"},
		{"asyncssh", "asyncssh_session.py"},
	} {
		t.Run(tc.module, func(t *testing.T) {
			requirePythonModule(t, tc.module)
			h := newHarness(t, opts...)
			id := "py-" + tc.module
			outdir := t.TempDir()
			sum := runPythonClient(t, h, tc.script, id, outdir)
			h.waitIdle(t)
			checkPythonShell(t, h, id, outdir, sum)
			checkPythonExec(t, h, id+"-exec", sum)
			// The clients send only requests the broker accepts (env ids,
			// pty-req, shell, exec, window-change); a refusal means the two
			// disagree about the protocol.
			for _, line := range strings.Split(h.logs.String(), "\n") {
				if strings.Contains(line, "refused") {
					t.Errorf("server refused a %s request: %s", tc.module, line)
				}
			}
		})
	}
}

// requirePythonModule skips unless the system interpreter can import module.
func requirePythonModule(t *testing.T, module string) {
	t.Helper()
	if testing.Short() {
		t.Skip("Python client tests skipped in -short mode")
	}
	if _, err := exec.LookPath(pythonBin); err != nil {
		skipClient(t, module, fmt.Sprintf("%s not found (Debian python3): %v", pythonBin, err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pythonBin, slices.Concat(pythonFlags, []string{"-W", "ignore", "-c", "import " + module})...)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		skipClient(t, module, fmt.Sprintf("%s cannot import %s (Debian python3-%s): %v: %s", pythonBin, module, module, err, bytes.TrimSpace(out)))
	}
}

// runPythonClient runs tests/clients/<script> against h and returns its
// summary. The host key is pinned through a known_hosts file; the client
// key is passed by path only.
func runPythonClient(t *testing.T, h *harness, script, id, outdir string) pythonSummary {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("clients", script))
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(h.addr)
	if err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(t.TempDir(), "known_hosts")
	line := "[" + host + "]:" + port + " " + string(gossh.MarshalAuthorizedKey(h.hostKey))
	if err := os.WriteFile(kh, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := slices.Concat(pythonFlags, []string{path, host, port, h.user, h.clientKey, kh, id, outdir})
	cmd := exec.CommandContext(ctx, pythonBin, args...)
	// The scripts dump every thread's traceback on SIGQUIT (faulthandler),
	// then WaitDelay kills them.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v (context: %v)\nstderr:\n%s\nstdout:\n%s\nserver log:\n%s",
			script, err, ctx.Err(), stderr.String(), stdout.String(), h.logs.String())
	}
	if stderr.Len() > 0 {
		t.Logf("%s stderr:\n%s", script, stderr.String())
	}
	var sum pythonSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("%s printed no JSON summary: %v: %q", script, err, stdout.String())
	}
	t.Logf("%s: %s", script, bytes.TrimSpace(stdout.Bytes()))
	return sum
}

// checkPythonShell checks the PTY shell session: the script's own verdict,
// the markers, and that the record replays to exactly the bytes exchanged.
func checkPythonShell(t *testing.T, h *harness, id, outdir string, sum pythonSummary) {
	t.Helper()
	if len(sum.Errors) > 0 || !sum.MarkersInOrder || sum.ShellExit != 3 || sum.ShellStderr != "" ||
		sum.SttySize == nil || *sum.SttySize != "40 120" {
		t.Errorf("summary: errors %q, markers in order %v, shell exit %d, stderr %q, stty size %v; want none, true, 3, \"\", 40 120",
			sum.Errors, sum.MarkersInOrder, sum.ShellExit, sum.ShellStderr, sttyOrNone(sum.SttySize))
	}
	received, err := os.ReadFile(filepath.Join(outdir, "received.bin"))
	if err != nil {
		t.Fatal(err)
	}
	sent, err := os.ReadFile(filepath.Join(outdir, "sent.bin"))
	if err != nil {
		t.Fatal(err)
	}

	var batch strings.Builder
	for i := 0; i < pyCommands; i++ {
		batch.WriteString(delimited(i, pyBodies[i%len(pyBodies)]))
	}
	if !bytes.HasPrefix(sent, []byte(batch.String())) || !bytes.HasSuffix(sent, []byte(pyExitCmd)) {
		t.Errorf("sent.bin is not the %d delimited commands ... %q: %q", pyCommands, pyExitCmd, sent)
	}
	starts, ends := startRE.FindAllSubmatch(received, -1), endRE.FindAllSubmatch(received, -1)
	if len(starts) != pyCommands || len(ends) != pyCommands {
		t.Fatalf("received %d start and %d end markers, want %d each", len(starts), len(ends), pyCommands)
	}
	for i := 0; i < pyCommands; i++ {
		if string(starts[i][1]) != strconv.Itoa(i) || string(ends[i][1]) != strconv.Itoa(i) {
			t.Fatalf("marker %d out of order: start %s end %s", i, starts[i][1], ends[i][1])
		}
		if want := pyCodes[i%len(pyCodes)]; string(ends[i][2]) != want {
			t.Errorf("command %d (%s) exit = %s, want %s", i, pyBodies[i%len(pyBodies)], ends[i][2], want)
		}
	}

	dir := h.sessionDir(pyRunID, id)
	if got := replay(t, dir, "out"); !bytes.Equal(got, received) {
		t.Errorf("scriptreplay --stream out differs from what the client received: %d vs %d bytes, first difference at %d",
			len(got), len(received), firstDiff(got, received))
	}
	if got := replay(t, dir, "in"); !bytes.Equal(got, sent) {
		t.Errorf("scriptreplay --stream in differs from what the client sent: %d vs %d bytes, first difference at %d",
			len(got), len(sent), firstDiff(got, sent))
	}
	checkRecordFiles(t, dir)
	hdr := timingHeaders(t, dir)
	for k, v := range map[string]string{
		"APTL_SESSION_ID": id, "APTL_RUN_ID": pyRunID, "APTL_CLOSE_REASON": "shell-exited", "EXIT_CODE": "3",
		"TERM": "xterm", "COLUMNS": "80", "LINES": "24", // the pty-req size; the change comes after shell
	} {
		if hdr[k] != v {
			t.Errorf("timing header %s = %q, want %q", k, hdr[k], v)
		}
	}
	timing, err := os.ReadFile(filepath.Join(dir, "pty", "timing"))
	if err != nil {
		t.Fatal(err)
	}
	var winch []string
	for _, line := range strings.Split(string(timing), "\n") {
		if strings.HasPrefix(line, "S ") {
			winch = append(winch, line)
		}
	}
	if len(winch) != 1 || !strings.HasSuffix(winch[0], " SIGWINCH ROWS=40 COLS=120") {
		t.Errorf("timing S lines = %q, want one SIGWINCH ROWS=40 COLS=120", winch)
	}
}

// checkPythonExec checks the exec session without a PTY, which ran on the
// same connection while the shell was open.
func checkPythonExec(t *testing.T, h *harness, id string, sum pythonSummary) {
	t.Helper()
	if sum.ExecExit != 7 || sum.ExecStdout != "out" || sum.ExecStderr != "err" {
		t.Errorf("exec: exit %d stdout %q stderr %q, want 7, %q, %q", sum.ExecExit, sum.ExecStdout, sum.ExecStderr, "out", "err")
	}
	dir := h.sessionDir(pyRunID, id)
	hdr := timingHeaders(t, dir)
	for k, v := range map[string]string{
		"APTL_SESSION_ID": id, "APTL_RUN_ID": pyRunID, "APTL_CLOSE_REASON": "shell-exited", "EXIT_CODE": "7",
	} {
		if hdr[k] != v {
			t.Errorf("exec timing header %s = %q, want %q", k, hdr[k], v)
		}
	}
	if hdr["COMMAND"] == "" {
		t.Error("exec timing header COMMAND is missing")
	}
	// stdout and stderr are both output; their relative order is the
	// process's, not fixed.
	if got := string(replay(t, dir, "out")); got != "outerr" && got != "errout" {
		t.Errorf("exec recorded output = %q, want out and err", got)
	}
}

func sttyOrNone(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}
