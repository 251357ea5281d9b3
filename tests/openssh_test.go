package tests

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// openssh builds a stock OpenSSH client command against the harness:
// no user config, no agent, the harness host key pinned. The command is
// bound to the test's deadline and gets SIGQUIT, then SIGKILL, if it hangs.
func (h *harness) openssh(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	return h.opensshAs(t, h.user, args...)
}

// opensshAs is openssh logging in as user.
func (h *harness) opensshAs(t testing.TB, user string, args ...string) *exec.Cmd {
	t.Helper()
	if testing.Short() {
		t.Skip("OpenSSH client tests skipped in -short mode")
	}
	bin, err := exec.LookPath("ssh")
	if err != nil {
		skipClient(t, "OpenSSH", "OpenSSH client (Debian openssh-client) not installed")
	}
	host, port, _ := net.SplitHostPort(h.addr)
	kh := filepath.Join(h.stateDir, "known_hosts")
	line := "[" + host + "]:" + port + " " + string(gossh.MarshalAuthorizedKey(h.hostKey))
	// Written aside and renamed: clients started at once must never read
	// a half-written file.
	tmp, err := os.CreateTemp(h.stateDir, "known_hosts.*")
	if err == nil {
		_, err = tmp.WriteString(line)
		err = errors.Join(err, tmp.Close(), os.Rename(tmp.Name(), kh))
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	base := []string{"-F", "none", "-p", port, "-i", h.clientKey,
		"-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + kh,
		"-o", "SendEnv=APTL_*", user + "@" + host}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "APTL_RUN_ID=openssh")
	return cmd
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if !errors.As(err, &ee) {
		t.Fatalf("ssh did not run: %v", err)
	}
	return ee.ExitCode()
}

func TestOpenSSHExecWithoutPTY(t *testing.T) { testOpenSSHExecWithoutPTY(t) }

// testOpenSSHExecWithoutPTY is TestOpenSSHExecWithoutPTY with extra harness options (agent_suites_test.go runs it
// with the agent adapter).
func testOpenSSHExecWithoutPTY(t *testing.T, opts ...harnessOption) {
	h := newHarness(t, opts...)
	cmd := h.openssh(t, "printf out; printf err >&2; head -c 5; exit 7")
	cmd.Env = append(cmd.Env, "APTL_SESSION_ID=ossh-exec")
	cmd.Stdin = strings.NewReader("12345")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if code := exitCode(t, cmd.Run()); code != 7 {
		t.Fatalf("exit code = %d, want 7 (stderr %q)", code, stderr.String())
	}
	if stdout.String() != "out12345" || stderr.String() != "err" {
		t.Errorf("stdout %q stderr %q, want %q and %q", stdout.String(), stderr.String(), "out12345", "err")
	}
	h.waitIdle(t)
	dir := h.sessionDir("openssh", "ossh-exec")
	if got := replay(t, dir, "in"); string(got) != "12345" {
		t.Errorf("recorded input = %q", got)
	}
	// stdout and stderr are both output; the record keeps their order.
	if got := replay(t, dir, "out"); len(got) != len("out12345err") {
		t.Errorf("recorded output = %q", got)
	}
	hdr := timingHeaders(t, dir)
	if hdr["COMMAND"] == "" || hdr["EXIT_CODE"] != "7" || hdr["APTL_CLOSE_REASON"] != "shell-exited" {
		t.Errorf("headers = %v", hdr)
	}
}

func TestOpenSSHPTYShell(t *testing.T) { testOpenSSHPTYShell(t) }

// testOpenSSHPTYShell is TestOpenSSHPTYShell with extra harness options (agent_suites_test.go runs it
// with the agent adapter).
func testOpenSSHPTYShell(t *testing.T, opts ...harnessOption) {
	h := newHarness(t, opts...)
	cmd := h.openssh(t, "-tt")
	cmd.Env = append(cmd.Env, "APTL_SESSION_ID=ossh-pty")
	cmd.Stdin = strings.NewReader("echo \"HELLO_$((6*7))\"; test -t 0 && echo ISATTY\nexit 4\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if code := exitCode(t, cmd.Run()); code != 4 {
		t.Fatalf("exit code = %d, want 4 (stderr %q)", code, stderr.String())
	}
	for _, want := range []string{"HELLO_42\r\n", "ISATTY\r\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	h.waitIdle(t)
	dir := h.sessionDir("openssh", "ossh-pty")
	if got := replay(t, dir, "out"); !bytes.Equal(got, stdout.Bytes()) {
		t.Errorf("recorded output differs from what ssh printed, at byte %d", firstDiff(got, stdout.Bytes()))
	}
}

// TestOpenSSHCloseOrder reads OpenSSH's own debug log to check the order in
// which the client saw the end of a session: output, exit-status, EOF, close.
func TestOpenSSHCloseOrder(t *testing.T) { testOpenSSHCloseOrder(t) }

// testOpenSSHCloseOrder is TestOpenSSHCloseOrder with extra harness options (agent_suites_test.go runs it
// with the agent adapter).
func testOpenSSHCloseOrder(t *testing.T, opts ...harnessOption) {
	h := newHarness(t, opts...)
	cmd := h.openssh(t, "-vvv", "seq 1 2000; exit 2")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if code := exitCode(t, cmd.Run()); code != 2 {
		t.Fatalf("exit code = %d, want 2", code)
	}
	if !strings.HasSuffix(stdout.String(), "\n2000\n") {
		t.Errorf("output incomplete: %d bytes", stdout.Len())
	}
	log := stderr.String()
	events := []*regexp.Regexp{
		regexp.MustCompile(`channel 0 rtype exit-status`),
		regexp.MustCompile(`channel 0: rcvd eof`),
		regexp.MustCompile(`channel 0: rcvd close`),
	}
	last := -1
	for _, re := range events {
		loc := re.FindStringIndex(log)
		if loc == nil {
			t.Fatalf("ssh -vvv never logged %q", re)
		}
		if loc[0] < last {
			t.Errorf("%q came out of order", re)
		}
		last = loc[0]
	}
}
