package tests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/launch"
)

// auditLauncher wraps the local adapter with processes whose audit
// session is fixed: ses 0 means none, with note as the reason.
type auditLauncher struct {
	launch.Launcher
	ses  uint32
	note string
}

func (l auditLauncher) Launch(ctx context.Context, spec launch.Spec) (launch.Process, error) {
	p, err := l.Launcher.Launch(ctx, spec)
	if err != nil {
		return nil, err
	}
	return auditProcess{p, l.ses, l.note}, nil
}

type auditProcess struct {
	launch.Process
	ses  uint32
	note string
}

func (p auditProcess) AuditSession() (uint32, bool) { return p.ses, p.ses != 0 }
func (p auditProcess) AuditSessionNote() string     { return p.note }

// TestBrokerRecordsAuditSession: the broker writes the launcher's audit
// session (or its reason for none) into the chain after the launch and
// before the first byte of the session, with the slave's name beside the
// id, and the session verifies.
func TestBrokerRecordsAuditSession(t *testing.T) {
	for _, tt := range []struct {
		name string
		l    func(launch.Launcher) launch.Launcher
		want map[string]string // "" value: any non-empty value
	}{
		{"given", func(l launch.Launcher) launch.Launcher { return auditLauncher{l, 4711, ""} },
			map[string]string{vocab.AttrAuditSes: "4711", vocab.AttrAuditTTY: ""}},
		{"none", func(l launch.Launcher) launch.Launcher { return auditLauncher{l, 0, "test: the kernel has no audit"} },
			map[string]string{vocab.AttrAuditSesReason: "test: the kernel has no audit"}},
		{"trampoline", func(l launch.Launcher) launch.Launcher { return l },
			map[string]string{vocab.AttrAuditSes: "", vocab.AttrAuditTTY: ""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, withLauncher(tt.l))
			id := "audit-" + tt.name
			ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": id}, 24, 80)
			ss.send("exit 3\n")
			ss.finish()
			h.waitIdle(t)
			dir := h.sessionDir("_unbound", id)
			records := readChain(t, dir)
			at, firstData := -1, -1
			for i, r := range records {
				switch {
				case r.Type == vocab.TypeAuditSession:
					at = i
					if len(r.Attrs) != len(tt.want) {
						t.Errorf("audit-session attributes %v, want the keys of %v", r.Attrs, tt.want)
					}
					for k, v := range tt.want {
						if got := r.Attrs[k]; got == "" || (v != "" && got != v) {
							t.Errorf("audit-session %s = %q, want %q", k, got, v)
						}
					}
					if tty := r.Attrs[vocab.AttrAuditTTY]; tty != "" && tty != records[0].Attrs["tty"] {
						t.Errorf("audit_tty %q, the open record's tty %q", tty, records[0].Attrs["tty"])
					}
				case r.Type == vocab.TypeData && firstData < 0:
					firstData = i
				}
			}
			if at < 0 || firstData < 0 || at > firstData {
				t.Errorf("audit-session record at %d, first data record at %d: want it before any byte", at, firstData)
			}
			// A session without an audit session says its processes are
			// unattributed, right after; one with an audit session does not.
			unattributed := at >= 0 && at+1 < len(records) && records[at+1].Type == vocab.TypeUnattributed
			if _, none := tt.want[vocab.AttrAuditSesReason]; unattributed != none {
				t.Errorf("unattributed record after the audit-session record: %v, want %v", unattributed, none)
			} else if none && records[at+1].Attrs[vocab.AttrReason] != vocab.UnattributedNoAuditSession {
				t.Errorf("unattributed record %v, want reason %s", records[at+1].Attrs, vocab.UnattributedNoAuditSession)
			}
			if rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{h.hostKey}}, evidence.Options{}); !rep.OK() {
				t.Errorf("does not verify: %v", rep.Anomalies)
			} else if tt.name == "trampoline" && (rep.AuditSession == nil || strconv.FormatUint(uint64(rep.AuditSession.Ses), 10) != records[at].Attrs[vocab.AttrAuditSes]) {
				t.Errorf("verify reports %+v", rep.AuditSession)
			}
		})
	}
}

// readChain returns the session's integrity records in order.
func readChain(t *testing.T, dir string) []integrity.Record {
	t.Helper()
	var out []integrity.Record
	for _, line := range logLines(mustRead(t, filepath.Join(dir, vocab.PTYDir, vocab.LogFile))) {
		var r integrity.Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// loginUIDUnset reports whether this test's loginuid is unset, so that the
// sessions it starts can get audit sessions of their own (a test run from
// a login session shares that session's, and cannot change it without
// CAP_AUDIT_CONTROL).
func loginUIDUnset() bool {
	b, err := os.ReadFile("/proc/self/loginuid")
	return err == nil && strings.TrimSpace(string(b)) == "4294967295"
}

// auditSessionOf returns the attributes of the session's audit-session record.
func auditSessionOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	for _, r := range readChain(t, dir) {
		if r.Type == vocab.TypeAuditSession {
			return r.Attrs
		}
	}
	t.Fatalf("%s has no audit-session record", dir)
	return nil
}
