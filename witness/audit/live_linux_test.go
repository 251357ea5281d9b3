package audit

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// The live suite: the real kernel audit, a real recorder session, and
// processes in their own PID namespaces (unshare) that set their loginuid
// as the launch agent's trampoline does. It changes kernel-wide state (it
// loads rules, and enables auditing while it runs), so it runs only with
// APTL_CAPTURE_SLOW_TESTS=1, as root, where the audit netlink answers.

// requireAudit skips unless the kernel's audit can be used here.
func requireAudit(t *testing.T) *control {
	t.Helper()
	if os.Getenv("APTL_CAPTURE_SLOW_TESTS") != "1" {
		t.Skip("the audit suite changes kernel-wide audit state: set APTL_CAPTURE_SLOW_TESTS=1 to run it")
	}
	if os.Geteuid() != 0 {
		t.Skip("the audit suite needs root (CAP_AUDIT_CONTROL, CAP_AUDIT_READ)")
	}
	for _, tool := range []string{"unshare", "setpriv", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the audit suite needs %s (Debian util-linux, bash)", tool)
		}
	}
	testutil.LockKernelAudit(t)
	c, err := openControl()
	if err != nil {
		t.Skipf("the kernel's audit netlink is not available here: %v", err)
	}
	st, err := c.status()
	if err != nil || st.Enabled == 2 {
		c.Close()
		t.Skipf("the kernel's audit status cannot be read or is locked: %v (enabled=%d)", err, st.Enabled)
	}
	if st.Enabled == 0 {
		// Registered first, so it runs after the test's own cleanups
		// removed their rules: the host's audit goes back to off.
		t.Cleanup(func() {
			if c, err := openControl(); err == nil {
				c.set(statusEnabled, 0, 0)
				c.Close()
			}
		})
	}
	if b, err := os.ReadFile("/proc/self/loginuid"); err != nil {
		c.Close()
		t.Skipf("no loginuid here: %v", err)
	} else if strings.TrimSpace(string(b)) != "4294967295" {
		// Children inherit it: they could not set their own.
		c.Close()
		t.Skipf("the test runs with a loginuid set (%s); its children could not set theirs", b)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

const labRules = `# the lab's rules
-D
-b 8192
--backlog_wait_time 60000
-a always,exit -F arch=b64 -S execve,execveat -k aptl_exec
-a always,exit -F arch=b32 -S execve -k aptl_exec
-a exit,always -F arch=b64 -S connect -k aptl_net
-a always,exit -F arch=b32 -S connect -k aptl_net
-w %s -p wa -k aptl_write
`

// capturingSource hands out the audit witnesses of sessions and keeps
// them, so the test binds the ses as the broker will.
type capturingSource struct {
	*Source
	mu sync.Mutex
	ws []recorder.Witness
}

func (c *capturingSource) Open(o recorder.WitnessOpen) (recorder.Witness, map[string]string) {
	w, a := c.Source.Open(o)
	c.mu.Lock()
	c.ws = append(c.ws, w)
	c.mu.Unlock()
	return w, a
}

// liveLimits are the rotation limits of the live tests' audit files.
var liveLimits = Limits{RotateBytes: 1 << 20, Files: 4}

// liveSession starts an engine with rs for the capture root and creates a
// recorder session whose audit witness is the engine's, as the broker
// does; the engine is closed when the test ends, if the test did not close
// it first (Close is idempotent).
func liveSession(t *testing.T, root string, rs *RuleSet, log *slog.Logger, sessionID string) (*Engine, *recorder.Session, recorder.Witness, gossh.Signer) {
	t.Helper()
	return liveSessionOf(t, Config{Root: root, Rules: rs, Limits: liveLimits, Log: log}, sessionID)
}

// liveSessionOf is liveSession with the engine's whole configuration.
func liveSessionOf(t *testing.T, cfg Config, sessionID string) (*Engine, *recorder.Session, recorder.Witness, gossh.Signer) {
	t.Helper()
	root, log := cfg.Root, cfg.Log
	eng, err := Start(cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { eng.Close() })
	src := &capturingSource{Source: NewSource(liveLimits, log, "")}
	src.SetEngine(eng, "")
	signer := testutil.NewSigner()
	sess, err := recorder.Create(root, recorder.Meta{RunID: "run-audit", SessionID: sessionID}, recorder.Options{Signer: signer, Witnesses: []recorder.WitnessSource{src}})
	if err != nil {
		t.Fatal(err)
	}
	if src.ws[0] == nil {
		t.Fatal("no audit witness opened")
	}
	return eng, sess, src.ws[0], signer
}

// sessionProcess starts script in its own PID namespace, without
// CAP_AUDIT_CONTROL (as the workload), after it set its loginuid to auid
// (auid 0: left unset); it returns the ses the kernel gave it.
func sessionProcess(t testing.TB, auid int, script string) (ses uint32, wait func()) {
	t.Helper()
	return sessionProcessOf(t, auid, script, "--bounding-set", "-audit_control")
}

// sessionProcessOf is sessionProcess with setpriv's options (none: the
// test's own capabilities, CAP_AUDIT_CONTROL included).
func sessionProcessOf(t testing.TB, auid int, script string, setpriv ...string) (ses uint32, wait func()) {
	t.Helper()
	sesFile := filepath.Join(t.TempDir(), "ses")
	pre := ""
	if auid != 0 {
		pre = fmt.Sprintf("echo %d > /proc/self/loginuid || exit 9; ", auid)
	}
	full := pre + "cat /proc/self/sessionid > " + sesFile + ".tmp && mv " + sesFile + ".tmp " + sesFile + "; " + script
	// setsid: no controlling terminal, so the kernel's records say
	// tty=(none), as for a session without a PTY.
	args := append(append([]string{"--pid", "--fork", "--mount-proc", "setsid", "setpriv"}, setpriv...), "--", "bash", "-c", full)
	cmd := exec.Command("unshare", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(sesFile)
		if err == nil {
			n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
			if err != nil {
				t.Fatalf("sessionid %q: %v", b, err)
			}
			ses = uint32(n)
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the session process never wrote its ses: %s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ses, func() {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("session process: %v: %s", err, out.String())
		}
	}
}

func TestLiveSessionRecords(t *testing.T) {
	ctl := requireAudit(t)
	root := t.TempDir()
	watched := t.TempDir()
	rs, err := ParseRules(strings.NewReader(fmt.Sprintf(labRules, watched)), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	// A rule someone else loaded before the witness, identical to one of
	// the lab's: the witness uses it and leaves it in place.
	pre := rs.Rules[2].kernelForm()
	if err := ctl.addRule(pre); err != nil {
		t.Fatalf("add the pre-existing rule: %v", err)
	}
	t.Cleanup(func() { ctl.delRule(pre) })
	before, err := ctl.listRules()
	if err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	eng, sess, w, signer := liveSession(t, root, rs, log, "sess-1")

	_, port, _ := strings.Cut(testutil.ClosingListener(t), "127.0.0.1:")
	target := filepath.Join(watched, "written-by-session")
	script := fmt.Sprintf(`/usr/bin/id >/dev/null; exec 3<>/dev/tcp/127.0.0.1/%s; exec 3>&-; echo hi > %s; `+
		`/bin/echo marker-session >/dev/null; if echo 1 > /proc/self/loginuid 2>/dev/null; then exit 7; fi; exit 0`, port, target)
	ses, wait := sessionProcess(t, 4242, script)
	w.(recorder.AuditBinder).BindAuditSession(ses, "")
	otherSes, waitOther := sessionProcess(t, 4243, "/bin/echo marker-other-session >/dev/null")
	_, waitUnset := sessionProcess(t, 0, "/bin/echo marker-unset >/dev/null")
	wait()
	waitOther()
	waitUnset()
	time.Sleep(300 * time.Millisecond)
	if err := sess.Close(0); err != nil {
		t.Fatal(err)
	}

	files, _ := filepath.Glob(filepath.Join(sess.Dir(), vocab.AuditDir, "audit-*.log"))
	if len(files) != 1 {
		t.Fatalf("session audit files: %v", files)
	}
	session, _ := os.ReadFile(files[0])
	global, _ := os.ReadFile(filepath.Join(root, vocab.AuditRootDir, vocab.AuditLogFile))
	sesField := fmt.Sprintf(" ses=%d ", ses)
	for _, want := range []string{
		`type=EXECVE msg=audit(`, `a0="/usr/bin/id"`, `key="aptl_exec"`, // the exec with argv
		`type=SOCKADDR`, `key="aptl_net"`, // the connect
		`key="aptl_write"`, `written-by-session" inode=`, // the write
		`type=LOGIN`, `res=0`, // the refused loginuid change
		sesField,
	} {
		if !strings.Contains(string(session), want) {
			t.Errorf("session file lacks %q", want)
		}
	}
	for _, name := range []string{"session file", "_audit/audit.log"} {
		b := session
		if name != "session file" {
			b = global
		}
		if bytes.Contains(b, []byte("marker-other-session")) || bytes.Contains(b, []byte(fmt.Sprintf(" ses=%d ", otherSes))) {
			t.Errorf("%s holds another session's records", name)
		}
		if bytes.Contains(b, []byte("marker-unset")) {
			t.Errorf("%s holds the records of a process without a loginuid", name)
		}
	}
	if !bytes.Contains(global, []byte(`a1="marker-session"`)) {
		t.Errorf("_audit/audit.log lacks the session's exec")
	}
	for _, line := range strings.Split(strings.TrimSpace(string(session)), "\n") {
		if !strings.HasPrefix(line, "type=") || !strings.Contains(line, " msg=audit(") {
			t.Errorf("not auditd's log format: %q", line)
		}
	}
	// The kernel's own records confirmed the bound ses on the session's
	// terminal ("(none)": no PTY), so the chain claims no unattributed session.
	if log, _ := os.ReadFile(filepath.Join(sess.Dir(), vocab.PTYDir, vocab.LogFile)); !bytes.Contains(log, []byte(`"type":"audit-file"`)) || bytes.Contains(log, []byte(`"type":"unattributed"`)) {
		t.Errorf("session confirmed by the kernel's records: want audit-file records and no unattributed record:\n%s", log)
	}
	verifyDetectsTampering(t, sess.Dir(), signer)
	ausearchFinds(t, filepath.Join(root, vocab.AuditRootDir, vocab.AuditLogFile), "aptl_exec", "/usr/bin/id")
	ausearchFinds(t, files[0], "aptl_exec", "/usr/bin/id")

	if err := eng.Close(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	after, err := ctl.listRules()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("rules before the witness: %d, after it stopped: %d", len(before), len(after))
	}
	found := false
	for _, k := range after {
		found = found || pre.sameRule(k)
	}
	if !found {
		t.Errorf("the pre-existing rule is gone after the witness stopped")
	}
	acct, _ := os.ReadFile(filepath.Join(root, vocab.ProcAcctDir, vocab.ProcAcctFile))
	if !bytes.Contains(acct, []byte(`comm="id" exe="/usr/bin/id"`)) || !bytes.Contains(acct, []byte(fmt.Sprintf("ses=%d status=0", ses))) {
		t.Errorf("_proc-acct lacks the session's id process:\n%s", acct)
	}
	t.Logf("session %d: records:\n%s\nproc-acct:\n%s", ses, session, acct)
}

// ausearchFinds runs ausearch -if on a file and requires the key's event
// with want in it.
func ausearchFinds(t *testing.T, file, key, want string) {
	t.Helper()
	if _, err := exec.LookPath("ausearch"); err != nil {
		t.Log("ausearch not installed (Debian auditd); skipping its check")
		return
	}
	out, err := exec.Command("ausearch", "-if", file, "-k", key).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(want)) {
		t.Errorf("ausearch -if %s -k %s: %v:\n%s", file, key, err, out)
	}
}

// verifyDetectsTampering requires the session to verify, with its audit
// file vouched for, and each kind of damage to its audit files to be found.
func verifyDetectsTampering(t *testing.T, dir string, signer gossh.Signer) {
	t.Helper()
	keys := evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}
	rep := evidence.Verify(dir, keys, evidence.Options{})
	if !rep.OK() || rep.Audit == nil || rep.Audit.Files != 1 || rep.Audit.Records == 0 {
		t.Fatalf("verify: ok=%v audit=%+v anomalies=%v", rep.OK(), rep.Audit, rep.Anomalies)
	}
	file := filepath.Join(vocab.AuditDir, FileName(1))
	for _, c := range []struct {
		name   string
		damage func(dir string) error
		want   string
	}{
		{"altered", func(d string) error { return flipByte(filepath.Join(d, file), 40) }, "(altered)"},
		{"truncated", func(d string) error { return os.Truncate(filepath.Join(d, file), 10) }, "(truncated)"},
		{"deleted", func(d string) error { return os.Remove(filepath.Join(d, file)) }, "missing"},
		{"extra", func(d string) error {
			return os.WriteFile(filepath.Join(d, vocab.AuditDir, FileName(2)), []byte("type=USER msg=audit(1.000:1): forged\n"), 0o600)
		}, "extra"},
	} {
		// The copy keeps the run and session folder names the log names.
		copyDir := filepath.Join(t.TempDir(), filepath.Base(filepath.Dir(dir)), filepath.Base(dir))
		if err := os.MkdirAll(filepath.Dir(copyDir), 0o700); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", dir, copyDir).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
		if err := c.damage(copyDir); err != nil {
			t.Fatal(err)
		}
		rep := evidence.Verify(copyDir, keys, evidence.Options{})
		found := false
		for _, a := range rep.Anomalies {
			found = found || (strings.HasPrefix(a.File, vocab.AuditDir+"/") && strings.Contains(a.Msg, c.want))
		}
		if rep.OK() || !found {
			t.Errorf("%s audit file: verify ok=%v, anomalies %v; want one saying %q", c.name, rep.OK(), rep.Anomalies, c.want)
		}
	}
}

func flipByte(path string, off int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		return err
	}
	b[0] ^= 1
	_, err = f.WriteAt(b, off)
	return err
}
