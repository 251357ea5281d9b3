package audit

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/auditfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// forgeEnv, in the environment of the test binary, makes it the forging
// session process instead of running the tests: it sends user messages
// whose text carries the value as a marker (forgeUserMessages).
const forgeEnv = "APTL_AUDIT_TEST_FORGE"

func TestMain(m *testing.M) {
	if marker := os.Getenv(forgeEnv); marker != "" {
		if err := forgeUserMessages(marker); err != nil {
			fmt.Fprintln(os.Stderr, "forge:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// forgeUserMessages sends, as a workload process with CAP_AUDIT_WRITE can,
// AUDIT_USER messages over the audit netlink whose text imitates the
// kernel's records: one plain, one with a newline followed by a whole
// SYSCALL record of another session and terminal, which would be a line
// of its own if the text were written as it came.
func forgeUserMessages(marker string) error {
	for _, text := range []string{
		"op=forged ses=999 tty=pts99 " + marker,
		"op=forged\ntype=SYSCALL msg=audit(1764581000.123:77): arch=c000003e syscall=59 success=yes exit=0 pid=1 auid=0 uid=0 tty=pts99 ses=999 comm=\"" + marker + "\" exe=\"/usr/bin/id\" key=\"aptl_exec\"",
	} {
		if err := sendUserMessage(text); err != nil {
			return fmt.Errorf("send AUDIT_USER: %w", err)
		}
	}
	return nil
}

// sendUserMessage sends one AUDIT_USER message and waits for the kernel's
// acknowledgement, as a process with CAP_AUDIT_WRITE can (the witness's
// own netlink, internal/auditnetlink, has no such request).
func sendUserMessage(text string) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	payload := append([]byte(text), 0)
	msg := make([]byte, unix.NLMSG_HDRLEN+len(payload))
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.AUDIT_USER)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(msg[8:], 1)
	copy(msg[unix.NLMSG_HDRLEN:], payload)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 1<<12)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil || len(msgs) == 0 || msgs[0].Header.Type != unix.NLMSG_ERROR || len(msgs[0].Data) < 4 {
		return fmt.Errorf("no acknowledgement (%v)", err)
	}
	if errno := int32(ne.Uint32(msgs[0].Data)); errno != 0 {
		return syscall.Errno(-errno)
	}
	return nil
}

// TestLiveForgedUserMessage: a session process that has CAP_AUDIT_WRITE
// (Docker's default set has it) sends user messages that imitate syscall
// records. The kernel records them as user messages (type=USER) with its
// own pid, auid and ses fields first; the witness attributes them by the
// kernel's ses, never by their text, and writes each as one USER line:
// nothing of the forged text becomes a SYSCALL line, and the session
// verifies with no record of another session and no other terminal.
//
// It runs on a quiet host and on a busy one, where another login's
// processes keep the audit socket from ever being found empty: the user
// message, which has no EOE, must still reach the session before it
// closes (the session closes as soon as its process has exited).
func TestLiveForgedUserMessage(t *testing.T) {
	requireAudit(t)
	t.Run("quiet", func(t *testing.T) { forgeInSession(t) })
	t.Run("busy", func(t *testing.T) {
		busyHost(t)
		forgeInSession(t)
	})
}

// busyHost starts, for the rest of the test, a process of another login
// (auid 5000, never bound) that runs /bin/true in a loop: each exec is an
// event on the audit socket.
func busyHost(t *testing.T) {
	noise := exec.Command("bash", "-c", "echo 5000 > /proc/self/loginuid || exit 9; while :; do /bin/true; done")
	if err := noise.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		noise.Process.Kill()
		noise.Wait()
	})
	time.Sleep(100 * time.Millisecond)
	if noise.ProcessState != nil {
		t.Fatalf("the busy process ended at once: %v", noise.ProcessState)
	}
}

func forgeInSession(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Skipf("the test binary cannot find itself to run as the forging process: %v", err)
	}
	root := t.TempDir()
	rs, err := ParseRules(strings.NewReader(fmt.Sprintf(labRules, t.TempDir())), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	_, sess, _, signer := liveSession(t, root, rs, log, "forger")
	marker := fmt.Sprintf("forged-marker-%d", time.Now().UnixNano())
	// The session process keeps CAP_AUDIT_WRITE (sessionProcess drops
	// only CAP_AUDIT_CONTROL); the forging binary is started by the
	// session's shell, so it carries the session's ses.
	// It forges once the witness is bound to its ses (events of an
	// unbound ses are not the session's), which the test signals with a
	// file; it gives up after 5 s.
	bound := filepath.Join(t.TempDir(), "bound")
	ses, wait := sessionProcess(t, 4244, fmt.Sprintf("for i in $(seq 100); do [ -e %q ] && break; sleep 0.05; done; %s=%s %q",
		bound, forgeEnv, marker, self))
	if err := sess.BindAuditSession(ses); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bound, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wait()
	if err := sess.Close(0); err != nil {
		t.Fatal(err)
	}

	session, err := os.ReadFile(filepath.Join(sess.Dir(), vocab.AuditDir, FileName(1)))
	if err != nil {
		t.Fatalf("the session's audit file: %v", err)
	}
	userLines := 0
	for _, line := range strings.Split(strings.TrimSuffix(string(session), "\n"), "\n") {
		if !strings.Contains(line, marker) {
			continue
		}
		if !strings.HasPrefix(line, "type=USER msg=audit(") {
			t.Errorf("forged text outside a USER record: %q", line)
			continue
		}
		userLines++
		_, text, _ := strings.Cut(line, " msg=")
		gotSes, _ := auditfmt.Field(text, "ses")
		gotAuid, _ := auditfmt.Field(text, "auid")
		if gotSes != strconv.FormatUint(uint64(ses), 10) || gotAuid != "4244" {
			t.Errorf("the USER record's kernel fields say ses=%s auid=%s, not the session's %d and 4244: %q", gotSes, gotAuid, ses, line)
		}
	}
	if userLines == 0 {
		t.Errorf("no USER record holds the forged text; the session file:\n%s", session)
	}
	if global, _ := os.ReadFile(filepath.Join(root, vocab.AuditRootDir, vocab.AuditLogFile)); !bytes.Contains(global, []byte(marker)) {
		t.Errorf("_audit/audit.log lacks the forged user message")
	}
	keys := evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}
	rep := evidence.Verify(sess.Dir(), keys, evidence.Options{})
	if !rep.OK() || rep.Audit == nil || rep.Audit.Files != 1 {
		t.Fatalf("verify: ok=%v audit=%+v anomalies=%v", rep.OK(), rep.Audit, rep.Anomalies)
	}
	if a := rep.AuditSession; a == nil || a.TTYs["pts99"] != 0 {
		t.Errorf("verify counts the forged text's terminal: %+v", a)
	}
	t.Logf("session %d: records:\n%s", ses, session)
}
