package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// buildCommand returns cmd/aptl-kali-capture, built once per test binary.
func buildCommand(t *testing.T) string {
	t.Helper()
	return built(t, captureBuild)
}

// buildStatic returns the server as compose/build.sh builds it for the
// images: without cgo, which serve needs to change every thread's
// capabilities.
func buildStatic(t *testing.T) string {
	t.Helper()
	return built(t, captureStatic)
}

// skipUnlessLive skips a test that builds the programs and logs in with
// stock OpenSSH where it cannot: in -short mode, or without ssh.
func skipUnlessLive(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the programs; skipped in -short mode")
	}
	if _, err := exec.LookPath("ssh"); err != nil {
		skipClient(t, "OpenSSH", "OpenSSH client (Debian openssh-client) not installed")
	}
}

// buildForLiveTest builds the binary for a test that runs it and logs in
// with stock OpenSSH, or skips that test.
func buildForLiveTest(t *testing.T) string {
	t.Helper()
	skipUnlessLive(t)
	return buildCommand(t)
}

// TestNewcomerDefaults runs the binary the way the README tells a newcomer
// to, in an empty directory, and logs in with the ssh command it prints.
// Only the port differs (127.0.0.1:0, so parallel runs cannot collide); the
// printed command must carry the real one.
func TestNewcomerDefaults(t *testing.T) {
	bin := buildForLiveTest(t)
	work := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, sshArgs, logs := startServe(t, bin, work)
	args := append(sshArgs, "-o", "BatchMode=yes", "echo NEWCOMER_$((40+2))")
	out, err := exec.CommandContext(ctx, "ssh", args...).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "NEWCOMER_42" {
		t.Fatalf("printed ssh command failed: %v\n%s\nserver logs:\n%s", err, out, logs.String())
	}

	// hostkey prints the key the server uses, and without --host the line
	// for the running server's own address: stock ssh, pinning only that
	// line, logs in.
	hkCmd := exec.Command(bin, "hostkey")
	hkCmd.Dir = work
	var fp bytes.Buffer
	hkCmd.Stderr = &fp
	line, err := hkCmd.Output()
	if err != nil {
		t.Fatalf("hostkey: %v", err)
	}
	if fields := strings.Fields(string(line)); len(fields) != 3 || !strings.Contains(logs.String(), "host_key="+strings.TrimSpace(fp.String())) {
		t.Errorf("hostkey printed %q (fingerprint %q), which is not the served key", line, fp.String())
	}
	pinned := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(pinned, line, 0o600); err != nil {
		t.Fatal(err)
	}
	strict := []string{"-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + pinned}
	for _, a := range sshArgs {
		if !strings.HasPrefix(a, "UserKnownHostsFile=") {
			strict = append(strict, a)
		} else {
			strict = strict[:len(strict)-1] // its -o
		}
	}
	if out, err := exec.CommandContext(ctx, "ssh", append(strict, "-o", "BatchMode=yes", "true")...).CombinedOutput(); err != nil {
		t.Errorf("ssh pinning only hostkey's line %q: %v\n%s", line, err, out)
	}

	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("serve did not stop cleanly on SIGTERM: %v\n%s", err, logs.String())
	}
	records, _ := filepath.Glob(filepath.Join(work, "aptl-dev", "captures", "_unbound", "anon-*", "pty", "typescript"))
	if len(records) != 2 { // the echo and the pinned login's true
		t.Fatalf("records = %v", records)
	}
	if ts, _ := os.ReadFile(records[0]); !strings.Contains(string(ts), "NEWCOMER_42") {
		records[0] = records[1]
	}
	ts, _ := os.ReadFile(records[0])
	if !strings.Contains(string(ts), "NEWCOMER_42") || !strings.Contains(string(ts), `[COMMAND_EXIT_CODE="0"]`) {
		t.Errorf("record incomplete:\n%s", ts)
	}
	// The binary hosts the login trampoline (cmd/aptl-kali-capture's main):
	// the local session got an audit session of its own.
	if loginUIDUnset() {
		if a := auditSessionOf(t, filepath.Dir(filepath.Dir(records[0]))); a[vocab.AttrAuditSes] == "" {
			t.Errorf("the session has no audit session of its own: %v", a)
		}
	}

}

// TestServeClearsBlockedSignalMask starts the server with SIGUSR1, SIGUSR2
// and SIGINT blocked, as some supervisors do: session processes must still
// start with an empty signal mask (launch/login/sigmask_linux.go). The Go runtime unblocks the
// signals the server itself handles (SIGINT here), not the others, which a
// session would otherwise inherit.
func TestServeClearsBlockedSignalMask(t *testing.T) {
	bin := buildForLiveTest(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 to start the server with signals blocked")
	}
	work := t.TempDir()
	starter := filepath.Join(work, "blocked-start")
	script := "#!/usr/bin/python3\nimport os, signal, sys\n" +
		"signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT})\n" +
		"os.execv(" + strconv.Quote(bin) + ", [" + strconv.Quote(bin) + "] + sys.argv[1:])\n"
	if err := os.WriteFile(starter, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	_, sshArgs, _ := startServe(t, starter, work, "--ready-file", filepath.Join(work, "ready"))
	out, err := exec.Command("ssh", append(sshArgs, "-o", "BatchMode=yes", "grep -E '^Sig(Blk|Ign)' /proc/self/status")...).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh: %v\n%s", err, out)
	}
	if got := string(out); got != "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n" {
		t.Errorf("session process started with %q", got)
	}
}
