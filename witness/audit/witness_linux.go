package audit

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/auditfmt"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/witness/witnessfs"
)

// Source is the audit class for recorder.Options.Witnesses. Until
// SetEngine (or when the engine could not start) sessions are recorded
// without audit records and their open records say why.
type Source = witnessfs.Source[Engine]

// NewSource returns the audit class, unavailable for reason until SetEngine.
func NewSource(limits Limits, log *slog.Logger, reason string) *Source {
	names := witnessfs.SourceNames{Class: vocab.ClassAudit, State: vocab.AttrAudit, Reason: vocab.AttrAuditReason, On: vocab.AuditOn, Unavailable: vocab.AuditUnavailable, Disabled: vocab.AuditDisabled}
	return witnessfs.NewSource(names, log, reason, func(eng *Engine, dir *os.File, o recorder.WitnessOpen) recorder.Witness {
		return &witness{eng: eng, notify: o.Notify, dir: dir, ses: unsetID,
			files: newFileSet(limits, func(name string) (*os.File, error) { return safefs.CreateIn(dir, name, 0o600) }, o.Gate)}
	})
}

// witness is one session's share of the engine: the events of the audit
// session bound to it (BindAuditSession), from Start to Close. It
// implements recorder.Witness and recorder.AuditBinder.
type witness struct {
	eng    *Engine
	notify func()
	dir    *os.File
	// notified is set from the first event after a checkpoint until the
	// next, so a busy session asks for at most one checkpoint a cycle.
	notified atomic.Bool

	mu              sync.Mutex // protects what follows; lock order: Engine.mu, then mu
	ses             uint32
	started, closed bool
	startedAt       time.Time // when Start ran
	files           *fileSet
	events, records int64
	lost            uint64 // records the kernel lost during the window (all of its, not only this session's)
	gaps            []gapRecord
	confirm         confirmation
}

// confirmWithin bounds how long after the bind the kernel's records must
// show the session's audit session on its terminal (the login shell's
// execve arrives within milliseconds).
var confirmWithin = 10 * time.Second // tests shorten it

// confirmation is the check that the reported ses is the session's own: a
// SYSCALL record of ses on the session's terminal (docs/AGENT.md, "Unattributed
// sessions"). It runs only where the witness's rules record execve, so that
// the session's first exec is certain to produce one.
type confirmation struct {
	checking  bool
	slave     string // the session's slave as recorded (audit_tty); "" without a PTY
	tty       string // its name in the kernel's records: ptsN, or "(none)"
	confirmed bool
	due       bool // the bound passed (or the session closed) unconfirmed
	emitted   bool
	timer     *time.Timer
}

// confirms reports whether ev holds a SYSCALL record on tty.
func confirms(ev *Event, tty string) bool {
	for _, r := range ev.Records {
		if r.Type != typeSyscall {
			continue
		}
		if t, ok := auditfmt.Field(r.Text, "tty"); ok && t == tty {
			return true
		}
	}
	return false
}

// kernelTTY is the kernel's name of a slave (/dev/pts/N → ptsN); without
// one, "(none)", as records of processes without a terminal say.
func kernelTTY(slave string) string {
	if n, ok := strings.CutPrefix(slave, "/dev/pts/"); ok && n != "" {
		return "pts" + n
	}
	return "(none)"
}

// record is the unattributed record of an unconfirmed audit session.
func (c *confirmation) record(ses uint32) map[string]string {
	a := map[string]string{vocab.AttrReason: vocab.UnattributedAuditUnconfirmed,
		vocab.AttrAuditSes: strconv.FormatUint(uint64(ses), 10), vocab.AttrWithin: confirmWithin.String()}
	if c.slave != "" {
		a[vocab.AttrAuditTTY] = c.slave
	}
	return a
}

// gapRecord is one gap of the audit witness: records lost or not stored
// (count of them, noticed at), or a window in which it was blind (at to
// last; count is its rules not in effect, kernelwatch_linux.go).
type gapRecord struct {
	reason string
	count  uint64
	at     time.Time // when it was noticed; a window's first instant
	last   time.Time // a window's last instant; zero for a loss
	err    string    // a window's refused restore: it was still open at last
	budget string    // the budget spent, of an audit-budget gap
}

// attrs are g's gap record's attributes.
func (g gapRecord) attrs() map[string]string {
	a := map[string]string{vocab.AttrReason: g.reason, vocab.AttrStream: vocab.StreamAudit,
		vocab.AttrCount: strconv.FormatUint(g.count, 10), vocab.AttrFirst: witnessfs.Stamp(g.at)}
	if !g.last.IsZero() {
		a[vocab.AttrLast] = witnessfs.Stamp(g.last)
	}
	if g.err != "" {
		a[vocab.AttrError] = g.err
	}
	if g.budget != "" {
		a[vocab.AttrBudget] = g.budget
	}
	return a
}

// appendLine appends g's line of _audit/gaps.log: when (a window's end),
// reason and count, and a window's first and last instants and error.
func (g gapRecord) appendLine(b []byte) []byte {
	when := g.at
	if !g.last.IsZero() {
		when = g.last
	}
	b = fmt.Appendf(b, "time=%s reason=%s count=%d", witnessfs.Stamp(when), g.reason, g.count)
	if !g.last.IsZero() {
		b = fmt.Appendf(b, " first=%s last=%s", witnessfs.Stamp(g.at), witnessfs.Stamp(g.last))
	}
	if g.err != "" {
		b = fmt.Appendf(b, " error=%s", strconv.Quote(g.err))
	}
	return append(b, '\n')
}

// Start implements recorder.Witness; the audit witness always opens its
// window.
func (w *witness) Start() map[string]string {
	w.mu.Lock()
	w.started, w.startedAt = true, time.Now()
	w.mu.Unlock()
	w.eng.attach(w)
	return nil
}

// BindAuditSession implements recorder.AuditBinder: from now on the
// session's file holds ses's events, including those the engine queued
// since the ses appeared. A second bind is ignored (one ses a session).
func (w *witness) BindAuditSession(ses uint32, slave string) {
	w.mu.Lock()
	if w.closed || w.ses != unsetID || ses == unsetID {
		w.mu.Unlock()
		return
	}
	w.ses = ses
	if w.eng.recordsExec() {
		w.confirm = confirmation{checking: true, slave: slave, tty: kernelTTY(slave)}
		w.confirm.timer = time.AfterFunc(confirmWithin, w.confirmTimeout)
	}
	w.mu.Unlock()
	w.eng.bind(w, ses)
}

// confirmTimeout marks the confirmation due when the bound passed
// unconfirmed, and asks for a checkpoint, which emits the record.
func (w *witness) confirmTimeout() {
	w.mu.Lock()
	due := w.confirm.checking && !w.confirm.confirmed && !w.closed
	w.confirm.due = due
	w.mu.Unlock()
	if due {
		w.notify()
	}
}

// deliver stores one event; the engine calls it holding its mu.
func (w *witness) deliver(ev *Event) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.events++
	w.records += int64(len(ev.Records))
	if w.confirm.checking && !w.confirm.confirmed && confirms(ev, w.confirm.tty) {
		w.confirm.confirmed = true
		w.confirm.timer.Stop()
	}
	w.files.write(ev)
	w.mu.Unlock()
	if !w.notified.Swap(true) {
		go w.notify() // not under any lock: the recorder takes its own
	}
}

// gap notes records the kernel or the engine dropped during the window,
// or a window in which the witness was blind.
func (w *witness) gap(g gapRecord) {
	w.mu.Lock()
	if g.reason == vocab.GapAuditLost {
		w.lost += g.count
	}
	w.gaps = append(w.gaps, g)
	w.mu.Unlock()
	if !w.notified.Swap(true) {
		go w.notify()
	}
}

// Checkpoint implements recorder.Witness.
func (w *witness) Checkpoint(emit recorder.Emit) (map[string]string, error) {
	w.notified.Store(false)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.emitPending(emit); err != nil {
		return nil, err
	}
	name, size, sum := w.files.Sync()
	if name == "" {
		return nil, nil
	}
	return map[string]string{vocab.AttrAuditFile: name, vocab.AttrAuditSize: strconv.FormatInt(size, 10), vocab.AttrAuditSHA256: sum}, nil
}

// emitPending emits the records of finished files and of gaps. Callers hold mu.
func (w *witness) emitPending(emit recorder.Emit) error {
	w.takeLowWindows()
	for _, r := range w.files.TakeFinished() {
		if err := emit(vocab.TypeAuditFile, r.Attrs()); err != nil {
			return err
		}
	}
	for len(w.gaps) > 0 {
		if err := emit(vocab.TypeGap, w.gaps[0].attrs()); err != nil {
			return err
		}
		w.gaps = w.gaps[1:]
	}
	if c := &w.confirm; c.due && !c.confirmed && !c.emitted {
		if err := emit(vocab.TypeUnattributed, c.record(w.ses)); err != nil {
			return err
		}
		c.emitted = true
	}
	return nil
}

// takeLowWindows turns the low windows that ended into gaps. Callers
// hold mu.
func (w *witness) takeLowWindows() {
	for _, lw := range w.files.lowWindows {
		w.gaps = append(w.gaps, lw.gap(vocab.GapAuditDiskLow))
	}
	w.files.lowWindows = nil
}

// Close implements recorder.Witness: it waits (bounded) until the engine
// has read what the kernel sent before now, detaches, finishes the last
// file and emits its record and the gaps; it returns the totals.
func (w *witness) Close(emit recorder.Emit) (map[string]string, error) {
	defer w.dir.Close()
	w.mu.Lock()
	started, ses := w.started, w.ses
	w.mu.Unlock()
	if !started {
		return nil, nil
	}
	w.eng.detach(w, ses, time.Now())
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if c := &w.confirm; c.checking && !c.confirmed {
		c.timer.Stop()
		c.due = true // the session ended before its records confirmed it
	}
	w.files.Finish()
	w.files.endLowWindow()
	w.takeLowWindows()
	for _, g := range []struct {
		c      counted
		reason string
	}{{w.files.rotated, vocab.GapAuditRotation}, {w.files.failed, vocab.GapAuditWriteFailed}} {
		if g.c.events > 0 {
			w.gaps = append(w.gaps, gapRecord{reason: g.reason, count: uint64(g.c.events), at: time.Now()})
		}
	}
	for _, b := range []struct {
		w      window
		budget string
	}{{w.files.runBudget, vocab.BudgetRun}, {w.files.volumeBudget, vocab.BudgetVolume}} {
		if b.w.events > 0 {
			g := b.w.gap(vocab.GapAuditBudget)
			g.budget = b.budget
			w.gaps = append(w.gaps, g)
		}
	}
	if err := w.emitPending(emit); err != nil {
		return nil, err
	}
	a := map[string]string{
		vocab.AttrAuditEvents: strconv.FormatInt(w.events, 10), vocab.AttrAuditRecords: strconv.FormatInt(w.records, 10),
		vocab.AttrAuditFiles: strconv.Itoa(w.files.Made()), vocab.AttrAuditLost: strconv.FormatUint(w.lost, 10),
	}
	if ses != unsetID {
		a[vocab.AttrAuditSes] = strconv.FormatUint(uint64(ses), 10)
	}
	return a, nil
}

var _ recorder.AuditBinder = (*witness)(nil)
