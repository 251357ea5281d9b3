package audit

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// uringRules are the lab's io_uring rules beside the exec rule, in the
// form `auditctl -l` lists them (-F key=, the operations joined by commas).
const uringRules = `-a always,exit -F arch=b64 -S execve,execveat -k aptl_exec
-a always,io_uring -S connect,openat,openat2,accept,sendmsg,recvmsg -F key=aptl_uring
`

// TestLiveIOURingRecorded: a session process opens a file and connects a
// socket through io_uring only (tests/clients/uringprobe: no open(2) or
// connect(2)); the kernel's io_uring list records both operations, the
// engine attributes them by ses like syscall records, and the session's
// audit file holds them (URINGOP, the operation's number, the key) and
// verifies.
func TestLiveIOURingRecorded(t *testing.T) {
	ctl := requireAudit(t)
	probe := filepath.Join(t.TempDir(), "uringprobe")
	if out, err := exec.Command("go", "build", "-o", probe, "../../tests/clients/uringprobe").CombinedOutput(); err != nil {
		t.Fatalf("build uringprobe: %v\n%s", err, out)
	}
	rs, err := ParseRules(strings.NewReader(uringRules), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.addRule(rs.Rules[1].kernelForm()); err != nil {
		t.Skipf("this kernel has no io_uring audit list (added in 5.16): %v", err)
	}
	ctl.delRule(rs.Rules[1].kernelForm())
	addr := testutil.ClosingListener(t)
	target := filepath.Join(t.TempDir(), "opened-through-io_uring")
	if err := os.WriteFile(target, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	_, sess, _, signer := liveSession(t, t.TempDir(), rs, log, "uring")
	out := filepath.Join(t.TempDir(), "probe.out")
	ses, wait := sessionProcess(t, 4247, probe+" "+target+" "+addr+" > "+out)
	if err := sess.BindAuditSession(ses); err != nil {
		t.Fatal(err)
	}
	wait()
	if b, _ := os.ReadFile(out); !bytes.Contains(b, []byte("openat=fd=")) || !bytes.Contains(b, []byte("connect=ok")) {
		t.Fatalf("the probe's io_uring operations did not run:\n%s", b)
	}
	time.Sleep(300 * time.Millisecond)
	if err := sess.Close(0); err != nil {
		t.Fatal(err)
	}
	session, _ := os.ReadFile(filepath.Join(sess.Dir(), vocab.AuditDir, FileName(1)))
	for op, name := range map[int]string{18: "openat", 16: "connect"} {
		// URINGOP has no ses of its own: the file holds only the
		// session's events (verify checks the ses of every record).
		re := regexp.MustCompile(`(?m)^type=URINGOP msg=audit\([^)]*\): uring_op=` + strconv.Itoa(op) + ` success=yes .*key="aptl_uring"$`)
		if !re.Match(session) {
			t.Errorf("the session's audit file has no %s (uring_op=%d) of ses %d:\n%s", name, op, ses, session)
		}
	}
	if !bytes.Contains(session, []byte(`name="`+target+`"`)) {
		t.Errorf("the io_uring openat's PATH record does not name the file")
	}
	rep := evidence.Verify(sess.Dir(), evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}, evidence.Options{})
	if !rep.OK() {
		t.Fatalf("verify: %v", rep.Anomalies)
	}
	ausearchFinds(t, filepath.Join(sess.Dir(), vocab.AuditDir, FileName(1)), "aptl_uring", "uring_op")
}

// TestLiveLoginuidChangeStaysInTheSession: a session process that may
// change its loginuid (CAP_AUDIT_CONTROL: root where the launcher is the
// local adapter) moves to a new audit session; the LOGIN record of the
// move is in the session's file, and so is what it runs afterwards under
// the new ses, and the session verifies.
func TestLiveLoginuidChangeStaysInTheSession(t *testing.T) {
	requireAudit(t)
	rs, err := ParseRules(strings.NewReader(uringRules), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	_, sess, _, signer := liveSession(t, t.TempDir(), rs, log, "moved")
	goAhead := filepath.Join(t.TempDir(), "go")
	newSes := filepath.Join(t.TempDir(), "new-ses")
	ses, wait := sessionProcessOf(t, 4248, `for i in $(seq 200); do [ -e `+goAhead+` ] && break; sleep 0.05; done; `+
		`echo 4249 > /proc/self/loginuid || exit 8; cat /proc/self/sessionid > `+newSes+`; /bin/echo marker-after-move >/dev/null`)
	if err := sess.BindAuditSession(ses); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goAhead, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wait()
	time.Sleep(300 * time.Millisecond)
	if err := sess.Close(0); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(newSes)
	moved := strings.TrimSpace(string(b))
	if moved == "" || moved == strconv.FormatUint(uint64(ses), 10) {
		t.Fatalf("the process did not move to a new audit session (%q, was %d)", moved, ses)
	}
	session, _ := os.ReadFile(filepath.Join(sess.Dir(), vocab.AuditDir, FileName(1)))
	if !regexp.MustCompile(`(?m)^type=LOGIN .* old-auid=4248 auid=4249 .* old-ses=` + strconv.FormatUint(uint64(ses), 10) + ` ses=` + moved + ` res=1`).Match(session) {
		t.Errorf("the session's audit file has no LOGIN record of the move from %d to %s:\n%s", ses, moved, session)
	}
	if !regexp.MustCompile(`(?m)^type=SYSCALL .* ses=`+moved+` comm="echo"`).Match(session) || !bytes.Contains(session, []byte(`a1="marker-after-move"`)) {
		t.Errorf("the exec after the move (ses %s) is not in the session's audit file:\n%s", moved, session)
	}
	rep := evidence.Verify(sess.Dir(), evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}, evidence.Options{})
	if !rep.OK() {
		t.Fatalf("verify: %v", rep.Anomalies)
	}
}
