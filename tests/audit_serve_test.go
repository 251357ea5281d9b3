package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// The audit witness as serve runs it: readiness states auditd= and
// procacct=, and a session runs whether or not the witness could start
// (capture is no login precondition). The witness's records themselves
// are tested in witness/audit (live_linux_test.go).

const auditRulesFile = `-a always,exit -F arch=b64 -S execve -k aptl_exec
-a always,exit -F arch=b32 -S execve -k aptl_exec
`

// serveWithAudit starts serve with the audit class; wrap, when not empty,
// is a command line the binary runs under (setpriv dropping capabilities).
func serveWithAudit(t *testing.T, wrap ...string) (work string, ready map[string]string, sshArgs []string, stop func() string) {
	t.Helper()
	bin := buildForLiveTest(t)
	work = t.TempDir()
	rules := filepath.Join(work, "lab.rules")
	if err := os.WriteFile(rules, []byte(auditRulesFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if len(wrap) > 0 {
		bin = execScript(t, filepath.Join(work, "wrapped-serve"), "", append(wrap, bin)...)
	}
	readyFile := filepath.Join(work, "ready")
	srv, args, logs := startServe(t, bin, work, "--ready-file", readyFile, "--classes", "pty,audit", "--audit-rules", rules)
	waitFor(t, 10*time.Second, "the readiness file", func() bool { _, err := os.Stat(readyFile); return err == nil })
	ready = map[string]string{}
	for _, line := range strings.Split(string(mustRead(t, readyFile)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			ready[k] = v
		}
	}
	return work, ready, args, func() string {
		srv.Process.Signal(syscall.SIGTERM)
		srv.Wait()
		return logs.String()
	}
}

// openRecord returns the open record of the single session under root.
func openRecordUnder(t *testing.T, root string) map[string]string {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(root, "*", "*", "pty", "integrity.jsonl"))
	if len(logs) != 1 {
		t.Fatalf("sessions under %s: %v", root, logs)
	}
	first, _, _ := strings.Cut(string(mustRead(t, logs[0])), "\n")
	var r struct {
		Type  string            `json:"type"`
		Attrs map[string]string `json:"attrs"`
	}
	if err := json.Unmarshal([]byte(first), &r); err != nil || r.Type != "open" {
		t.Fatalf("first record %q: %v", first, err)
	}
	return r.Attrs
}

func TestAuditDegradedWithoutCapabilities(t *testing.T) {
	var wrap []string
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("setpriv"); err != nil {
			t.Skip("needs setpriv (Debian util-linux) to drop CAP_AUDIT_CONTROL and CAP_AUDIT_READ as root")
		}
		wrap = []string{"setpriv", "--bounding-set", "-audit_control,-audit_read", "--"}
	}
	work, ready, sshArgs, stop := serveWithAudit(t, wrap...)
	if ready["auditd"] != "degraded" || ready["procacct"] != "degraded" || ready["pty"] != "ok" {
		t.Fatalf("readiness %v, want auditd and procacct degraded, pty ok", ready)
	}
	out, err := exec.Command("ssh", append(sshArgs, "-o", "BatchMode=yes", "echo AUDIT_$((40+2))")...).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "AUDIT_42" {
		t.Fatalf("a session did not run while audit is degraded: %v: %s", err, out)
	}
	logs := stop()
	open := openRecordUnder(t, filepath.Join(work, "aptl-dev", "captures"))
	if open["audit"] != "unavailable" || open["audit_reason"] == "" {
		t.Errorf("open record audit=%q reason=%q, want unavailable with a reason\n%s", open["audit"], open["audit_reason"], logs)
	}
}

func TestAuditReadyAsRoot(t *testing.T) {
	if os.Getenv("APTL_CAPTURE_SLOW_TESTS") != "1" || os.Geteuid() != 0 {
		t.Skip("loads audit rules into the kernel: root and APTL_CAPTURE_SLOW_TESTS=1 only")
	}
	testutil.LockKernelAudit(t)
	if b, _ := os.ReadFile("/proc/sys/kernel/audit_enabled"); strings.TrimSpace(string(b)) == "2" {
		t.Skip("the kernel's audit configuration is locked")
	}
	work, ready, sshArgs, stop := serveWithAudit(t)
	if ready["auditd"] != "ok" || ready["procacct"] != "ok" || ready["audit_rules"] == "" {
		t.Skipf("the audit witness did not start here (readiness %v); the degraded case is TestAuditDegradedWithoutCapabilities", ready)
	}
	if out, err := exec.Command("ssh", append(sshArgs, "-o", "BatchMode=yes", "true")...).CombinedOutput(); err != nil {
		t.Fatalf("session: %v: %s", err, out)
	}
	logs := stop()
	open := openRecordUnder(t, filepath.Join(work, "aptl-dev", "captures"))
	if open["audit"] != "on" {
		t.Errorf("open record audit=%q, want on\n%s", open["audit"], logs)
	}
	if !strings.Contains(logs, "audit witness stopped") {
		t.Errorf("serve did not stop the audit witness:\n%s", logs)
	}
	if _, err := os.Stat(filepath.Join(work, "aptl-dev", "captures", "_audit", "audit.log")); err != nil {
		t.Errorf("_audit/audit.log: %v", err)
	}
}

// TestAuditConfirmsSessionTerminal: with the audit witness running and
// rules that record execve, the kernel's records confirm each session's
// audit session on its own terminal (its slave with a PTY, none without),
// so neither session's chain says it is unattributed. The other way round
// (a ses the records show on another terminal) is witness/audit's
// TestConfirmOnTerminal.
func TestAuditConfirmsSessionTerminal(t *testing.T) {
	if os.Getenv("APTL_CAPTURE_SLOW_TESTS") != "1" || os.Geteuid() != 0 {
		t.Skip("loads audit rules into the kernel: root and APTL_CAPTURE_SLOW_TESTS=1 only")
	}
	testutil.LockKernelAudit(t)
	if b, _ := os.ReadFile("/proc/self/loginuid"); strings.TrimSpace(string(b)) != "4294967295" {
		t.Skip("this test runs with a loginuid set: its sessions cannot get audit sessions of their own")
	}
	work, ready, sshArgs, stop := serveWithAudit(t)
	if ready["auditd"] != "ok" {
		t.Skipf("the audit witness did not start here (readiness %v)", ready)
	}
	for _, tty := range [][]string{{"-tt"}, {"-T"}} {
		args := append(append(append([]string{}, sshArgs...), "-o", "BatchMode=yes"), tty...)
		if out, err := exec.Command("ssh", append(args, "/bin/true")...).CombinedOutput(); err != nil {
			t.Fatalf("session %v: %v: %s", tty, err, out)
		}
	}
	logs := stop()
	chains, _ := filepath.Glob(filepath.Join(work, "aptl-dev", "captures", "*", "*", "pty", "integrity.jsonl"))
	if len(chains) != 2 {
		t.Fatalf("sessions: %v\n%s", chains, logs)
	}
	for _, chain := range chains {
		log := string(mustRead(t, chain))
		if !strings.Contains(log, `"type":"audit-session","attrs":{"audit_ses":`) {
			t.Errorf("%s: no audit session bound:\n%s", chain, log)
		}
		if strings.Contains(log, `"type":"unattributed"`) {
			t.Errorf("%s: unattributed although the kernel's records name its audit session:\n%s", chain, log)
		}
	}
}
