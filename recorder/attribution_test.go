package recorder

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// binderSource opens witnesses that remember the audit session bound to
// them; plainSource's witnesses are not AuditBinders.
type binderSource struct{ opened []*binderWitness }

func (b *binderSource) Class() string { return "binder" }
func (b *binderSource) Open(WitnessOpen) (Witness, map[string]string) {
	w := &binderWitness{}
	b.opened = append(b.opened, w)
	return w, nil
}

type plainWitness struct{}

func (plainWitness) Start() map[string]string                   { return nil }
func (plainWitness) Checkpoint(Emit) (map[string]string, error) { return nil, nil }
func (plainWitness) Close(emit Emit) (map[string]string, error) { return nil, nil }

type binderWitness struct {
	plainWitness
	bound []uint32
}

func (w *binderWitness) BindAuditSession(ses uint32, _ string) { w.bound = append(w.bound, ses) }

type plainSource struct{}

func (plainSource) Class() string { return "plain" }
func (plainSource) Open(WitnessOpen) (Witness, map[string]string) {
	return plainWitness{}, nil
}

// TestBindAuditSession: the audit-session record holds the id and the PTY
// slave, every AuditBinder witness gets the id (others are left alone),
// and the session verifies with the examiner reporting both.
func TestBindAuditSession(t *testing.T) {
	src := &binderSource{}
	opts := testOptions()
	opts.Witnesses = []WitnessSource{src, plainSource{}}
	s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "s", Term: "xterm", TTY: "/dev/pts/7", Rows: 24, Cols: 80}, opts)
	mustOK(t, s.BindAuditSession(4711))
	mustOK(t, s.Output([]byte("hello\r\n")))
	mustOK(t, s.Close(0))
	if len(src.opened) != 1 || len(src.opened[0].bound) != 1 || src.opened[0].bound[0] != 4711 {
		t.Errorf("the AuditBinder witness was bound to %v, want [4711] once", src.opened[0].bound)
	}
	log := readLog(t, s.Dir())
	if !strings.Contains(log, `"type":"audit-session","attrs":{"audit_ses":"4711","audit_tty":"/dev/pts/7"}`) {
		t.Errorf("no audit-session record with ses and tty in:\n%s", log)
	}
	rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{})
	if !rep.OK() {
		t.Fatalf("session with an audit-session record does not verify: %v", rep.Anomalies)
	}
	if a := rep.AuditSession; a == nil || a.Ses != 4711 || a.TTY != "/dev/pts/7" || a.Reason != "" {
		t.Errorf("verify reports audit session %+v", a)
	}
}

// TestNoAuditSession: a session without one says why, binds no witness,
// and verifies with the reason reported.
func TestNoAuditSession(t *testing.T) {
	src := &binderSource{}
	opts := testOptions()
	opts.Witnesses = []WitnessSource{src}
	s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "s"}, opts)
	const why = "the launch agent is older than audit session reporting"
	mustOK(t, s.NoAuditSession(why))
	mustOK(t, s.Close(0))
	if len(src.opened[0].bound) != 0 {
		t.Errorf("a witness was bound without an audit session: %v", src.opened[0].bound)
	}
	rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{})
	if !rep.OK() {
		t.Fatalf("does not verify: %v", rep.Anomalies)
	}
	if a := rep.AuditSession; a == nil || a.Ses != 0 || a.Reason != why {
		t.Errorf("verify reports audit session %+v, want the reason", a)
	}
	// Never silence: the chain says the processes are unattributed, and
	// verify reports it.
	if log := readLog(t, s.Dir()); !strings.Contains(log, `"type":"unattributed","attrs":{"audit_ses_reason":"`+why+`","reason":"no-audit-session"}`) {
		t.Errorf("no unattributed record in:\n%s", log)
	}
	if rep.Unattributed != vocab.UnattributedNoAuditSession || !hasNote(rep.Notes, evidence.NoteUnattributed, why) {
		t.Errorf("verify reports unattributed %q, notes %+v", rep.Unattributed, rep.Notes)
	}
	if err := s.BindAuditSession(1); err == nil {
		t.Error("BindAuditSession after Close succeeded")
	}
}

func hasNote(notes []evidence.Note, kind evidence.Kind, text string) bool {
	for _, n := range notes {
		if n.Kind == kind && strings.Contains(n.Msg, text) {
			return true
		}
	}
	return false
}

func readLog(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestVerifyRefusesImplausibleAuditSession: audit-session records the
// recorder never writes (an id the kernel never gives, neither id nor
// reason, a second one) are anomalies, though they chain and are signed.
func TestVerifyRefusesImplausibleAuditSession(t *testing.T) {
	for _, tt := range []struct {
		name    string
		records []map[string]string
		want    string
	}{
		{"unset id", []map[string]string{{"audit_ses": "4294967295"}}, "not an audit session id"},
		{"zero", []map[string]string{{"audit_ses": "0"}}, "not an audit session id"},
		{"leading zero", []map[string]string{{"audit_ses": "07"}}, "not an audit session id"},
		{"empty", []map[string]string{{}}, "neither audit_ses nor audit_ses_reason"},
		{"second", []map[string]string{{"audit_ses": "5"}, {"audit_ses": "6"}}, "second audit-session record"},
		{"unattributed, unknown reason", []map[string]string{{"type": "unattributed", "reason": "because"}}, "not one the recorder writes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestSession(t, Meta{RunID: "r", SessionID: "s"})
			for _, r := range tt.records {
				typ := "audit-session"
				if r["type"] != "" { // another record type of the attribution
					typ = r["type"]
					delete(r, "type")
				}
				mustOK(t, s.Event(typ, r))
			}
			mustOK(t, s.Close(0))
			leaves(s, evidence.StatusTampered) // the recorder never writes these records
			rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{})
			if rep.OK() || !strings.Contains(fmt.Sprint(rep.Anomalies), tt.want) {
				t.Errorf("verify = OK %v, anomalies %v; want one containing %q", rep.OK(), rep.Anomalies, tt.want)
			}
		})
	}
}

// blindSource's witnesses say on Open that they witness, and on Start that
// they could not open their window.
type blindSource struct{}

func (blindSource) Class() string { return "blind" }
func (blindSource) Open(WitnessOpen) (Witness, map[string]string) {
	return blindWitness{}, map[string]string{"blind": "on"}
}

type blindWitness struct{ plainWitness }

func (blindWitness) Start() map[string]string {
	return map[string]string{"blind": "unavailable", "blind_reason": "no socket"}
}

// TestWitnessStartOverridesOpen: what a witness says of its start
// replaces what its Open said, in the open record.
func TestWitnessStartOverridesOpen(t *testing.T) {
	opts := testOptions()
	opts.Witnesses = []WitnessSource{blindSource{}}
	s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "s", Term: "xterm", Rows: 24, Cols: 80}, opts)
	mustOK(t, s.Close(0))
	if log := readLog(t, s.Dir()); !strings.Contains(log, `"blind":"unavailable","blind_reason":"no socket"`) {
		t.Errorf("the open record does not say what the witness's start said:\n%s", log)
	}
}
