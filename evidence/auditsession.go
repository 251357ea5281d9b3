package evidence

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/auditfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// AuditSessionReport is what the log says of the session's kernel audit
// session: its id and terminal, by which an examiner selects the session's
// audit records (`ses=`, `tty=`), or why it has none.
type AuditSessionReport struct {
	Ses    uint32 `json:"ses,omitempty"`
	TTY    string `json:"tty,omitempty"`
	Reason string `json:"reason,omitempty"`
	// The cross-check of the agent-reported ses with the terminal, read
	// from the session's audit files once their digests matched (absent
	// when none was read): how many SYSCALL records of the session's ses
	// they hold, the terminals those records name (`tty=`, "(none)" for
	// none) with how many name each, and whether the session's own slave
	// (TTY as the kernel names it, ptsN) is among them.
	SyscallRecords int64            `json:"syscall_records,omitempty"`
	TTYs           map[string]int64 `json:"ttys,omitempty"`
	OwnTTYSeen     *bool            `json:"own_tty_seen,omitempty"`
	seq            int64            // the audit-session record's
}

// noteAuditSession checks an audit-session record: one per log, with
// either an id the kernel can give (1 to 2^32-2) or a reason. A record
// that breaks this is an anomaly; the chain goes on (it still chains).
func (v *verifier) noteAuditSession(r *integrity.Record, seq, off int64) {
	if v.rep.AuditSession != nil {
		v.anomaly(KindChainBroken, vocab.LogFile, seq, off, "second %s record", vocab.TypeAuditSession)
		return
	}
	a := AuditSessionReport{TTY: r.Attrs[vocab.AttrAuditTTY], Reason: r.Attrs[vocab.AttrAuditSesReason], seq: seq}
	if s, ok := r.Attrs[vocab.AttrAuditSes]; ok {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 || n == 1<<32-1 || strconv.FormatUint(n, 10) != s {
			v.anomaly(KindRecordMalformed, vocab.LogFile, seq, off, "%s record: %s is not an audit session id", vocab.TypeAuditSession, vocab.AttrAuditSes)
			return
		}
		a.Ses = uint32(n)
	} else if a.Reason == "" {
		v.anomaly(KindRecordMalformed, vocab.LogFile, seq, off, "%s record has neither %s nor %s", vocab.TypeAuditSession, vocab.AttrAuditSes, vocab.AttrAuditSesReason)
		return
	}
	v.rep.AuditSession = &a
}

// noteUnattributed reports an unattributed record as a note: the
// session's processes are not in an audit session of their own. A reason
// the recorder never writes is an anomaly. The why is the launcher's text
// (the workload's, with the agent adapter): quoted, bounded.
func (v *verifier) noteUnattributed(r *integrity.Record, seq, off int64) {
	reason := r.Attrs[vocab.AttrReason]
	if !slices.Contains(vocab.UnattributedReasons, reason) {
		v.anomaly(KindRecordMalformed, vocab.LogFile, seq, off, "%s record with reason %q, not one the recorder writes", vocab.TypeUnattributed, truncateText(reason))
		return
	}
	v.rep.Unattributed = reason
	if reason == vocab.UnattributedAuditUnconfirmed {
		v.note(NoteUnattributed, "the session's processes are unattributed (%s): no SYSCALL record of audit session %s on %s within %s, the witness saw",
			reason, printable(r.Attrs[vocab.AttrAuditSes]), orNone(truncateText(r.Attrs[vocab.AttrAuditTTY])), printable(r.Attrs[vocab.AttrWithin]))
		return
	}
	v.note(NoteUnattributed, "the session's processes are unattributed (%s): no audit session of their own; %q", reason, truncateText(r.Attrs[vocab.AttrAuditSesReason]))
}

// truncateText bounds a record's free text in a report line.
func truncateText(s string) string {
	const maxText = 200
	if len(s) > maxText {
		return s[:maxText] + "..."
	}
	return s
}

// Bounds of what the terminal cross-check keeps of hostile files: distinct
// terminal names (the rest are counted under moreTTYs), and a name's form.
const (
	maxTTYNames = 32
	moreTTYs    = "(more)"
	badTTY      = "(unreadable)"
	unsetSes    = "4294967295"
	noTTY       = "(none)" // a process without a controlling terminal
)

var (
	ttyName   = regexp.MustCompile(`^(\(none\)|[A-Za-z0-9_.\[\]-]{1,32})$`)
	slavePath = regexp.MustCompile(`^/dev/pts/([0-9]{1,9})$`)
)

// sesTerms is what the session's audit files say of its audit session and
// terminals (the report's cross-check), and of records of another session.
type sesTerms struct {
	ses string // the signed audit_ses
	// moved are the audit sessions LOGIN records of the files moved the
	// session's processes to (at most maxMoves): theirs are its records.
	moved    map[string]bool
	syscalls int64
	ttys     map[string]int64
}

// auditTerms returns what learns the cross-check from one verified audit
// file (rel), or nil when the session has no signed audit session id to
// check it against. A record of another audit session than the session's
// is an anomaly, the first of each file reported: the witness writes into
// a session's files only the events of its ses.
func (v *verifier) auditTerms(rel string) func(typ, text []byte, off int64) {
	a := v.rep.AuditSession
	if a == nil || a.Ses == 0 || a.seq > v.rep.LastVerifiedSeq {
		return nil
	}
	if v.terms == nil {
		v.terms = &sesTerms{ses: strconv.FormatUint(uint64(a.Ses), 10), ttys: map[string]int64{}, moved: map[string]bool{}}
	}
	t := v.terms
	var foreign int64
	return func(typ, text []byte, off int64) {
		s := string(text)
		ses, ok := auditfmt.Field(s, "ses")
		if ok && ses == unsetSes {
			// A loginuid change that failed: the session it was made in.
			ses, ok = auditfmt.Field(s, "old-ses")
		}
		if string(typ) == "LOGIN" && ok {
			ses = v.followMove(t, s, ses, rel, off)
		}
		if ok && ses != t.ses && !t.moved[ses] {
			if foreign++; foreign == 1 {
				v.anomaly(KindAuditForeignSes, rel, -1, off, "a %s record of audit session %s in the files of audit session %s (the %s record's)",
					printable(string(typ)), printable(ses), t.ses, vocab.TypeAuditSession)
			}
			return
		}
		if string(typ) != "SYSCALL" {
			return
		}
		t.syscalls++
		tty, _ := auditfmt.Field(s, "tty")
		tty = printable(tty)
		if _, known := t.ttys[tty]; !known && len(t.ttys) >= maxTTYNames {
			tty = moreTTYs
		}
		t.ttys[tty]++
	}
}

// maxMoves bounds the audit sessions a session's files may move to.
const maxMoves = 64

var sesNumber = regexp.MustCompile(`^[0-9]{1,10}$`)

// followMove reads a LOGIN record that moved a process of the session
// (old-ses one of its audit sessions, res=1) to a new audit session ses,
// which is the session's from then on, and returns the session the
// record belongs to: the one it moved from.
func (v *verifier) followMove(t *sesTerms, text, ses, rel string, off int64) string {
	old, _ := auditfmt.Field(text, "old-ses")
	res, _ := auditfmt.Field(text, "res")
	// The kernel numbers audit sessions upward: a move goes to a newer one.
	oldN, err1 := strconv.ParseUint(old, 10, 32)
	newN, err2 := strconv.ParseUint(ses, 10, 32)
	if res != "1" || (old != t.ses && !t.moved[old]) || err1 != nil || err2 != nil || newN <= oldN {
		return ses
	}
	if !t.moved[ses] && ses != t.ses && sesNumber.MatchString(ses) && len(t.moved) < maxMoves {
		t.moved[ses] = true
		v.note(NoteAuditSesMoved, "a LOGIN record at %s offset %d moved a process of the session from audit session %s to %s; its records are the session's", rel, off, old, ses)
	}
	return old
}

// printable is a name from a record (a terminal, a record type, an id) as
// the report may print it.
func printable(name string) string {
	if ttyName.MatchString(name) {
		return name
	}
	return badTTY
}

// reportTerms fills the report's cross-check and notes a terminal other
// than the session's slave: not a failure (sudo with use_pty, script,
// tmux and screen open ptys of their own, and their processes keep the
// session's ses), but what an examiner weighs the agent-reported ses by.
func (v *verifier) reportTerms() {
	t, a := v.terms, v.rep.AuditSession
	if t == nil {
		return
	}
	own := kernelTTY(a.TTY)
	seen := own != "" && t.ttys[own] > 0
	a.SyscallRecords, a.TTYs, a.OwnTTYSeen = t.syscalls, t.ttys, &seen
	var others []string
	var n int64
	for _, name := range sortedTTYs(t.ttys) {
		if name != own && name != noTTY {
			others = append(others, fmt.Sprintf("%s (%d)", name, t.ttys[name]))
			n += t.ttys[name]
		}
	}
	if len(others) > 0 {
		v.note(NoteAuditOtherTTY, "%d of the %d SYSCALL records of audit session %s name a terminal other than the session's %s: %s (a pty the session opened itself: sudo with use_pty, script, tmux)",
			n, t.syscalls, t.ses, orNone(own), strings.Join(others, ", "))
	}
}

// kernelTTY is the kernel's name (ptsN) of a slave the sidecar allocated
// (/dev/pts/N), "" when audit_tty is not one.
func kernelTTY(slave string) string {
	if m := slavePath.FindStringSubmatch(slave); m != nil {
		return "pts" + m[1]
	}
	return ""
}

func sortedTTYs(m map[string]int64) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func orNone(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// Terminals is the cross-check as the verify command prints it: the
// SYSCALL records per terminal, and whether they are the session's own
// ("120 SYSCALL records ((none) 4, pts3 116): on the session's terminal or none"); "" when no audit
// file was read.
func (a *AuditSessionReport) Terminals() string {
	if a.OwnTTYSeen == nil {
		return ""
	}
	var parts []string
	other, own := false, kernelTTY(a.TTY)
	for _, name := range sortedTTYs(a.TTYs) {
		parts = append(parts, fmt.Sprintf("%s %d", name, a.TTYs[name]))
		other = other || (name != own && name != noTTY)
	}
	s := fmt.Sprintf("%d SYSCALL records", a.SyscallRecords)
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	switch {
	case other:
		return s + ": terminals other than the session's (see the note)"
	case !*a.OwnTTYSeen:
		return s + ": none on the session's terminal"
	}
	return s + ": on the session's terminal or none"
}
