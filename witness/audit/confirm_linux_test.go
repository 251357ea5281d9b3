package audit

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// confirmWitness is a session's witness on an engine that reads nothing
// (stopped: Close does not wait for a kernel), bound to ses 7 on slave.
func confirmWitness(t *testing.T, execAudited bool, slave string) (*witness, <-chan struct{}) {
	t.Helper()
	e := newEngine(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.execAudited = execAudited
	e.stop.Store(true)
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	notified := make(chan struct{}, 8)
	w := &witness{eng: e, notify: func() { notified <- struct{}{} }, dir: dir, ses: unsetID,
		files: newFileSet(Limits{RotateBytes: 1 << 20, Files: 2}, func(name string) (*os.File, error) { return safefs.CreateIn(dir, name, 0o600) }, nil)}
	w.Start()
	w.BindAuditSession(7, slave)
	return w, notified
}

func syscallEvent(tty string) *Event {
	return &Event{Ses: 7, Records: []Record{{Type: typeSyscall,
		Text: "audit(1796112666.000:1): arch=c000003e syscall=59 success=yes exit=0 pid=9 auid=1000 uid=1000 tty=" + tty + " ses=7 comm=\"bash\""}}}
}

// unattributedRecords runs emit and returns the unattributed records.
func unattributedRecords(t *testing.T, run func(emit func(string, map[string]string) error) error) []map[string]string {
	t.Helper()
	var got []map[string]string
	if err := run(func(typ string, a map[string]string) error {
		if typ == vocab.TypeUnattributed {
			got = append(got, a)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func closeRecords(t *testing.T, w *witness) []map[string]string {
	return unattributedRecords(t, func(emit func(string, map[string]string) error) error { _, err := w.Close(emit); return err })
}

// TestConfirmOnTerminal: where the rules record execve, a session whose
// reported ses the kernel's records show on its own terminal is confirmed
// (no record); one whose ses shows only on another terminal, or not at
// all, gets an unattributed record at close; without a PTY the terminal
// is "(none)"; with rules that do not record execve nothing is claimed.
func TestConfirmOnTerminal(t *testing.T) {
	for _, tt := range []struct {
		name, slave string
		execAudited bool
		events      []string // the ttys of the session's SYSCALL records
		want        bool     // an unattributed record
	}{
		{"own terminal", "/dev/pts/3", true, []string{"pts3"}, false},
		{"own terminal after others", "/dev/pts/3", true, []string{"(none)", "pts5", "pts3"}, false},
		{"another session's terminal", "/dev/pts/3", true, []string{"pts5", "(none)"}, true},
		{"no records", "/dev/pts/3", true, nil, true},
		{"pipes: no terminal", "", true, []string{"(none)"}, false},
		{"pipes: a terminal", "", true, []string{"pts4"}, true},
		{"rules without execve", "/dev/pts/3", false, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := confirmWitness(t, tt.execAudited, tt.slave)
			for _, tty := range tt.events {
				w.deliver(syscallEvent(tty))
			}
			got := closeRecords(t, w)
			if (len(got) == 1) != tt.want || len(got) > 1 {
				t.Fatalf("unattributed records %v, want %v", got, tt.want)
			}
			if tt.want {
				a := got[0]
				if a[vocab.AttrReason] != vocab.UnattributedAuditUnconfirmed || a[vocab.AttrAuditSes] != "7" || a[vocab.AttrAuditTTY] != tt.slave {
					t.Errorf("record %v", a)
				}
			}
		})
	}
}

// TestConfirmBound: a session not confirmed within the bound asks for a
// checkpoint, which emits the record once; a confirming record later
// changes nothing already stated.
func TestConfirmBound(t *testing.T) {
	defer func(d time.Duration) { confirmWithin = d }(confirmWithin)
	confirmWithin = 50 * time.Millisecond
	w, notified := confirmWitness(t, true, "/dev/pts/3")
	select {
	case <-notified:
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint asked for after the bound")
	}
	cp := func(emit func(string, map[string]string) error) error { _, err := w.Checkpoint(emit); return err }
	if got := unattributedRecords(t, cp); len(got) != 1 || got[0][vocab.AttrWithin] != "50ms" {
		t.Fatalf("checkpoint after the bound: %v, want one unattributed record within 50ms", got)
	}
	w.deliver(syscallEvent("pts3"))
	if got := unattributedRecords(t, cp); len(got) != 0 {
		t.Errorf("second checkpoint: %v", got)
	}
	if got := closeRecords(t, w); len(got) != 0 {
		t.Errorf("close: %v", got)
	}
}

// TestRecordsExec: which rule sets let the witness confirm.
func TestRecordsExec(t *testing.T) {
	execve := archSyscalls(archX8664)["execve"]
	arch := Field{ID: fieldArch, Op: opEqual, Value: archX8664}
	for _, tt := range []struct {
		name  string
		rules []Rule
		want  bool
	}{
		{"execve b64", []Rule{{Action: actionAlways, Syscalls: []int{execve}, Fields: []Field{arch}}}, true},
		{"every syscall", []Rule{{Action: actionAlways}}, true},
		{"execve, but only some users", []Rule{{Action: actionAlways, Syscalls: []int{execve}, Fields: []Field{arch, {ID: fieldUID, Op: opEqual, Value: 0}}}}, false},
		{"execve b32 only", []Rule{{Action: actionAlways, Syscalls: []int{archSyscalls(archI386)["execve"]}, Fields: []Field{{ID: fieldArch, Op: opEqual, Value: archI386}}}}, false},
		{"never", []Rule{{Action: actionNever, Syscalls: []int{execve}}}, false},
		{"a watch", []Rule{{Action: actionAlways, Watch: "/etc"}}, false},
		// An io_uring rule never sees an execve: it cannot confirm a
		// session's audit session on its terminal.
		{"every io_uring operation", []Rule{{URing: true, Action: actionAlways}}, false},
		{"none", nil, false},
	} {
		if got := recordsExec(tt.rules); got != tt.want {
			t.Errorf("%s: recordsExec = %v, want %v", tt.name, got, tt.want)
		}
	}
}
