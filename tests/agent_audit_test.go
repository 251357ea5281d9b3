package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// nsAuditSession runs two sessions through the agent in its own PID
// namespace and checks their kernel audit attribution from outside the
// workload: the ses the agent reported (the audit-session record) is the
// shell's /proc/<pid>/sessionid as the sidecar's namespace sees it, fresh
// per session, inherited by the shell's children, with loginuid the
// user's uid; a root process in the session without CAP_AUDIT_CONTROL
// cannot change its loginuid; the record names the PTY slave, and the
// session still verifies.
func nsAuditSession(t *testing.T, h *harness, ns *nsAgent) {
	if _, err := exec.LookPath("capsh"); err != nil {
		t.Skip("capsh (libcap2-bin) not installed: needed to drop CAP_AUDIT_CONTROL in the session")
	}
	if !loginUIDUnset() {
		t.Skip("this test's loginuid is set: its children share its audit session, so none gets a fresh one")
	}
	var seen []uint32
	for i := range 2 {
		id := fmt.Sprintf("ns-audit-%d", i)
		ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": id}, 24, 80)
		// Markers are built by the shell, so the typed line's echo cannot match.
		ss.send("echo \"SES_$(cat /proc/self/sessionid)_LUID_$(cat /proc/self/loginuid)_UID_$(id -u)_END\"\n")
		m := regexp.MustCompile(`SES_(\d+)_LUID_(\d+)_UID_(\d+)_END\r\n`).FindStringSubmatch(
			ss.waitOutput(regexp.MustCompile(`SES_\d+_LUID_\d+_UID_\d+_END\r\n`)))
		childSes, childLUID, uid := m[1], m[2], m[3]
		if childLUID != uid {
			t.Errorf("session %s: the shell's child has loginuid %s, want the user's uid %s", id, childLUID, uid)
		}
		leader, err := onlyChild(t, ns.pid)
		if err != nil {
			t.Fatal(err)
		}
		outside := readProcField(t, leader, "sessionid")
		if outside != childSes {
			t.Errorf("session %s: the shell's ses seen from outside is %s, its child's %s", id, outside, childSes)
		}
		if got := readProcField(t, leader, "loginuid"); got != uid {
			t.Errorf("session %s: the shell's loginuid seen from outside is %s, want %s", id, got, uid)
		}
		if i == 0 {
			nsLoginUIDLocked(t, ss, uid)
		}
		ss.send("exit 0\n")
		if err := ss.finish(); err != nil {
			t.Fatalf("session %s ended with %v", id, err)
		}
		h.waitIdle(t)
		dir := h.sessionDir("_unbound", id)
		rec, openTTY := auditSessionRecord(t, dir)
		if rec[vocab.AttrAuditSes] != outside {
			t.Errorf("session %s: the audit-session record says ses %q, the kernel %s", id, rec[vocab.AttrAuditSes], outside)
		}
		if rec[vocab.AttrAuditTTY] == "" || rec[vocab.AttrAuditTTY] != openTTY {
			t.Errorf("session %s: audit_tty %q, the open record's tty %q", id, rec[vocab.AttrAuditTTY], openTTY)
		}
		rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{h.hostKey}}, evidence.Options{})
		if !rep.OK() {
			t.Fatalf("session %s does not verify: %v", id, rep.Anomalies)
		}
		if a := rep.AuditSession; a == nil || strconv.FormatUint(uint64(a.Ses), 10) != outside || a.TTY != openTTY {
			t.Errorf("session %s: verify reports audit session %+v, want ses %s tty %s", id, a, outside, openTTY)
		}
		n, _ := strconv.ParseUint(outside, 10, 32)
		seen = append(seen, uint32(n))
	}
	if seen[0] == seen[1] {
		t.Errorf("two sessions share audit session %d", seen[0])
	}
	if agentLogHas(ns.logs.String(), "session started") && !strings.Contains(ns.logs.String(), `"audit_ses":`) {
		t.Error("the agent's log does not name the sessions' audit session")
	}
}

// nsLoginUIDLocked: a root process in the session can change its loginuid
// only with CAP_AUDIT_CONTROL. The control (a child with the capability,
// which the test's root has) succeeds, so the refusal without it is the
// capability's doing; the loginuid stays the user's uid.
func nsLoginUIDLocked(t *testing.T, ss *shellSession, uid string) {
	ss.send("sh -c 'echo 4242 > /proc/self/loginuid && echo \"CTRL_$(cat /proc/self/loginuid)_OK\"'\n")
	ss.waitOutput(regexp.MustCompile(`CTRL_4242_OK\r\n`))
	ss.send("capsh --drop=cap_audit_control -- -c 'echo 4242 > /proc/self/loginuid; echo \"RC_$?_LUID_$(cat /proc/self/loginuid)_END\"'\n")
	out := ss.waitOutput(regexp.MustCompile(`RC_\d+_LUID_\d+_END\r\n`))
	m := regexp.MustCompile(`RC_(\d+)_LUID_(\d+)_END\r\n`).FindStringSubmatch(out)
	if !strings.Contains(out, "Operation not permitted") || m[1] == "0" || m[2] != uid {
		t.Errorf("without CAP_AUDIT_CONTROL the loginuid write was not refused with EPERM (status %s, loginuid %s, want %s): %q", m[1], m[2], uid, out)
	}
}

func readProcField(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// auditSessionRecord returns the attributes of the session's one
// audit-session record and the open record's tty.
func auditSessionRecord(t *testing.T, dir string) (map[string]string, string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var found map[string]string
	tty := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r integrity.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		switch r.Type {
		case vocab.TypeOpen:
			tty = r.Attrs["tty"]
		case vocab.TypeAuditSession:
			if found != nil {
				t.Errorf("a second audit-session record")
			}
			found = r.Attrs
		}
	}
	if found == nil {
		t.Fatal("no audit-session record")
	}
	return found, tty
}
