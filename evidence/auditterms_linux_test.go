package evidence_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
	"github.com/aptl/aptl-kali-capture/witness/witnessfs"
)

// oneFileWitness is a witness of one class that writes content, as the
// witnesses write their files, into the session's one file of that class
// and vouches for it with a file record at the close, counting count items.
type oneFileWitness struct {
	class, state, name   string
	fileType, countAttr  string
	stateAttr, filesAttr string
	content              string
	count                int64
}

// auditLines is the audit witness writing the given lines, as the audit
// witness writes the kernel's records, one record per line.
func auditLines(lines string) oneFileWitness {
	return oneFileWitness{class: vocab.ClassAudit, state: "on", name: "audit-000001.log",
		fileType: vocab.TypeAuditFile, countAttr: vocab.AttrRecords,
		stateAttr: vocab.AttrAudit, filesAttr: vocab.AttrAuditFiles,
		content: lines, count: int64(strings.Count(lines, "\n"))}
}

func (o oneFileWitness) Class() string { return o.class }
func (o oneFileWitness) Open(wo recorder.WitnessOpen) (recorder.Witness, map[string]string) {
	return &oneFileWitnessRun{o: o, mkdir: wo.Mkdir}, map[string]string{o.stateAttr: o.state}
}

type oneFileWitnessRun struct {
	o     oneFileWitness
	mkdir func() (*os.File, error)
}

func (w *oneFileWitnessRun) Start() map[string]string                            { return nil }
func (w *oneFileWitnessRun) Checkpoint(recorder.Emit) (map[string]string, error) { return nil, nil }
func (w *oneFileWitnessRun) Close(emit recorder.Emit) (map[string]string, error) {
	d, err := w.mkdir()
	if err != nil {
		return nil, err
	}
	defer d.Close()
	f, err := safefs.CreateIn(d, w.o.name, 0o600)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(w.o.content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(w.o.content))
	now := time.Now()
	rec := witnessfs.FileRecord{Name: w.o.name, CountAttr: w.o.countAttr, Count: w.o.count,
		Size: int64(len(w.o.content)), SHA256: hex.EncodeToString(sum[:]), First: now, Last: now}
	if err := emit(w.o.fileType, rec.Attrs()); err != nil {
		return nil, err
	}
	return map[string]string{w.o.filesAttr: "1"}, nil
}

// recordAudit records a finalized session on /dev/pts/3 bound to audit
// session 7 whose audit file holds lines.
func recordAudit(t *testing.T, lines string) string {
	t.Helper()
	return recordWith(t, auditLines(lines), func(s *recorder.Session) error { return s.BindAuditSession(7) })
}

// recordWith records a finalized session on /dev/pts/3 with the one
// witness w; bind, when set, runs before its output (an audit binding).
func recordWith(t *testing.T, w recorder.WitnessSource, bind func(*recorder.Session) error) string {
	t.Helper()
	s, err := recorder.Create(t.TempDir(), recorder.Meta{RunID: "run-1", SessionID: "aud", TTY: "/dev/pts/3"},
		recorder.Options{Signer: recordertest.Signer(), Witnesses: []recorder.WitnessSource{w}})
	if err != nil {
		t.Fatal(err)
	}
	if bind != nil {
		if err := bind(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Output([]byte("$ id\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	return s.Dir()
}

// Records as the kernel writes them (witness/audit/events.go), with
// the fields the cross-check reads.
func syscallLine(serial int, tty, ses string) string {
	return "type=SYSCALL msg=audit(1764581000.123:" + strings.Repeat("1", serial) + "): arch=c000003e syscall=59 success=yes exit=0 ppid=10 pid=11 auid=1000 uid=0 gid=0 tty=" + tty + " ses=" + ses + ` comm="id" exe="/usr/bin/id" key="aptl_exec"` + "\n"
}

const execveLine = `type=EXECVE msg=audit(1764581000.123:1): argc=1 a0="id"` + "\n"

func kinds(rep *evidence.Report) (anomalies, notes []evidence.Kind) {
	for _, a := range rep.Anomalies {
		anomalies = append(anomalies, a.Kind)
	}
	for _, n := range rep.Notes {
		notes = append(notes, n.Kind)
	}
	return anomalies, notes
}

// TestAuditTerminalCrossCheck: verify reads the session's verified audit
// file and reports the terminals of its SYSCALL records against the slave
// the sidecar allocated: its own slave and (none) verify plainly; another
// terminal is a note (sessions open ptys of their own), never an anomaly;
// a record of another audit session is an anomaly.
func TestAuditTerminalCrossCheck(t *testing.T) {
	// A forged user message whose text names another ses and tty: the
	// kernel's fields come first, and they are what is read.
	userMsg := `type=USER msg=audit(1764581000.200:9): pid=12 uid=0 auid=1000 ses=7 msg='ses=99 tty=pts9 forged'` + "\n"
	// A failed loginuid change: ses unset, old-ses the session's.
	failedLogin := `type=LOGIN msg=audit(1764581000.300:10): pid=13 uid=0 old-auid=1000 auid=0 tty=pts3 old-ses=7 ses=4294967295 res=0` + "\n"
	for _, tt := range []struct {
		name      string
		lines     string
		ttys      map[string]int64
		ownSeen   bool
		anomalies []evidence.Kind
		notes     []evidence.Kind
		statement string
	}{
		{"own slave and none", syscallLine(1, "pts3", "7") + execveLine + syscallLine(2, "(none)", "7") + userMsg + failedLogin,
			map[string]int64{"pts3": 1, "(none)": 1}, true, nil, nil, "on the session's terminal or none"},
		{"a pty of its own", syscallLine(1, "pts3", "7") + syscallLine(2, "pts5", "7") + syscallLine(3, "pts5", "7"),
			map[string]int64{"pts3": 1, "pts5": 2}, true, nil, []evidence.Kind{evidence.NoteAuditOtherTTY}, "other than the session's"},
		{"never its slave", syscallLine(1, "pts8", "7"),
			map[string]int64{"pts8": 1}, false, nil, []evidence.Kind{evidence.NoteAuditOtherTTY}, "other than the session's"},
		{"another session's record", syscallLine(1, "pts3", "7") + syscallLine(2, "pts4", "8") + syscallLine(3, "pts4", "8"),
			map[string]int64{"pts3": 1}, true, []evidence.Kind{evidence.KindAuditForeignSes}, nil, "on the session's terminal or none"},
		{"an unreadable tty", syscallLine(1, "pts3\x1b[2J", "7"),
			map[string]int64{"(unreadable)": 1}, false, nil, []evidence.Kind{evidence.NoteAuditOtherTTY}, "other than the session's"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep := evidence.Verify(recordAudit(t, tt.lines), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
			anomalies, notes := kinds(rep)
			if !slices.Equal(anomalies, tt.anomalies) || !slices.Equal(notes, tt.notes) {
				t.Fatalf("anomalies %v, notes %v; want %v and %v (%v %v)", anomalies, notes, tt.anomalies, tt.notes, rep.Anomalies, rep.Notes)
			}
			if rep.Audit == nil || rep.Audit.Files != 1 {
				t.Fatalf("audit file not verified: %+v", rep.Audit)
			}
			a := rep.AuditSession
			if a == nil || a.OwnTTYSeen == nil {
				t.Fatalf("no terminal cross-check in %+v", a)
			}
			var syscalls int64
			for _, n := range tt.ttys {
				syscalls += n
			}
			if len(a.TTYs) != len(tt.ttys) || *a.OwnTTYSeen != tt.ownSeen || a.SyscallRecords != syscalls {
				t.Errorf("ttys %v own seen %v syscalls %d; want %v, %v, %d", a.TTYs, *a.OwnTTYSeen, a.SyscallRecords, tt.ttys, tt.ownSeen, syscalls)
			}
			for name, n := range tt.ttys {
				if a.TTYs[name] != n {
					t.Errorf("tty %s counted %d times, want %d", name, a.TTYs[name], n)
				}
			}
			if !strings.Contains(a.Terminals(), tt.statement) {
				t.Errorf("statement %q does not say %q", a.Terminals(), tt.statement)
			}
		})
	}
}

// TestAuditTerminalsOnlyFromVerifiedFiles: an audit file whose digest does
// not match is not read for the cross-check (its lines are not the
// sidecar's).
func TestAuditTerminalsOnlyFromVerifiedFiles(t *testing.T) {
	dir := recordAudit(t, syscallLine(1, "pts3", "7"))
	path := dir + "/" + vocab.AuditDir + "/audit-000001.log"
	if err := os.WriteFile(path, []byte(syscallLine(1, "pts9", "8")), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := evidence.Verify(dir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	anomalies, notes := kinds(rep)
	if !slices.Contains(anomalies, evidence.KindFileDigestMismatch) || slices.Contains(anomalies, evidence.KindAuditForeignSes) || len(notes) != 0 {
		t.Errorf("altered file: anomalies %v notes %v; want a digest mismatch and nothing read from it", anomalies, notes)
	}
	if a := rep.AuditSession; a == nil || a.OwnTTYSeen != nil || a.TTYs != nil {
		t.Errorf("cross-check from an altered file: %+v", a)
	}
}

// TestForeignAuditRecordPointsAtTheFirst: of several records of another
// audit session in one file, the finding names the first, by its offset
// in the file (no log record is concerned).
func TestForeignAuditRecordPointsAtTheFirst(t *testing.T) {
	own := syscallLine(1, "pts3", "7")
	rep := evidence.Verify(recordAudit(t, own+syscallLine(2, "pts4", "8")+syscallLine(3, "pts4", "8")), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	found := anomaliesOf(rep, evidence.KindAuditForeignSes)
	if len(found) != 1 || found[0].Seq != -1 || found[0].Offset != int64(len(own)) {
		t.Errorf("foreign-session findings %v, want one at offset %d, record -1", found, len(own))
	}
}
