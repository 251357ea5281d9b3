package audit

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// What the witness relies on in the kernel, kept in place while it runs.
//
// Auditing must stay enabled, and every rule the engine loaded, or found
// already loaded and uses, must stay in the kernel's list. Anyone with
// CAP_AUDIT_CONTROL can undo either (an operator's auditctl -D or -e 0, a
// host auditd reloading its rules, another witness on the same kernel
// stopping and removing the rule it owned), and the engine would go on
// running, blind: the kernel sends nothing it could count as lost. So
// every status poll (statusEvery) checks both, restores what it can
// (auditing back on; the rule added again, now the engine's own and removed
// at stop) and states the window in which the witness was blind as a gap
// record of every open session and a line of _audit/gaps.log: from the
// last check that found it in place to the check that restored it.
//
// A restore the kernel refuses (the configuration locked, enabled=2, after
// the rules were removed; a watched folder that is gone) is stated at once,
// with its error, and retried at every poll, warned about once. The open
// window is stated again, whole, when it ends, to a session that starts
// while it is open, and to one that closes while it is open (its end is
// then the session's), so no session's record ends inside a blind window
// without saying so.

// reliedRule is a rule the engine's witnessing depends on.
type reliedRule struct {
	where  string   // the rules file's location: the only rule text the log gets
	load   ruleData // the form the engine adds, and removes at stop
	listed ruleData // the form the kernel listed just after Start
	owned  bool     // the engine added it, so it removes it at stop
}

// listedIndex narrows a listed rule to the relied rules it may be, so one
// check is a pass over the list, however many rules the host has.
type listedIndex struct {
	flags, action uint32
	mask          [bitmaskWords]uint32
	key           string
}

func indexOf(d ruleData) listedIndex {
	return listedIndex{flags: d.flags, action: d.action, mask: d.mask, key: d.key()}
}

// blindness is one thing the witness relies on, as the checks found it.
type blindness struct {
	reason string    // its gap reason
	good   time.Time // the last check that found it in place (or restored it)
	open   bool      // found missing, and its restore refused so far
	count  int       // the witness's rules not in effect: the most seen in the window
	err    string    // why the restore was refused
}

// window is the gap record of b's open window, up to now.
func (b *blindness) window(now time.Time) gapRecord {
	return gapRecord{reason: b.reason, count: uint64(b.count), at: b.good, last: now, err: b.err}
}

// learnListedForms lists the kernel's rules once all are loaded and keeps
// the form in which it lists each relied rule: later checks compare the
// listing with that, not with the form the engine sent, so a rule the
// kernel normalises (the syscall classes of the mask) is never taken for
// a missing one. A relied rule the kernel does not list fails the start:
// its removal could never be noticed.
func (e *Engine) learnListedForms(now time.Time) error {
	listed, err := e.ctl.listRules()
	if err != nil {
		return fmt.Errorf("audit: list the kernel's rules: %w", err)
	}
	taken := make([]bool, len(listed))
	e.byForm = map[listedIndex][]int{}
	for i := range e.rules {
		r := &e.rules[i]
		found := false
		for j, k := range listed {
			if !taken[j] && r.load.sameRule(k) {
				r.listed, taken[j], found = k, true, true
				break
			}
		}
		if !found {
			return fmt.Errorf("audit: the kernel does not list the rule of %s after it was loaded; its removal could not be noticed", r.where)
		}
		ix := indexOf(r.listed)
		e.byForm[ix] = append(e.byForm[ix], i)
	}
	e.mu.Lock()
	e.disabled = blindness{reason: vocab.GapAuditDisabled, good: now}
	e.removed = blindness{reason: vocab.GapAuditRulesRemoved, good: now}
	e.mu.Unlock()
	return nil
}

// checkKernel is the poll's check of what the witness relies on; st is
// the status the poll just read.
func (e *Engine) checkKernel(st status, now time.Time) {
	if st.Enabled != 0 {
		e.inPlace(&e.disabled, now)
	} else {
		err := e.ctl.set(statusEnabled, 1, 0)
		if err == nil {
			// Enabled by the engine now: turned off again at stop when
			// no rule remains, as when it enabled auditing at start.
			e.ownsEnabled = true
		} else {
			err = fmt.Errorf("enable auditing: %w", err)
		}
		e.missing(&e.disabled, len(e.rules), err, nil, now)
	}
	listed, err := e.ctl.listRules()
	if err != nil {
		// Nothing is known: the next check that lists dates its window
		// from the last one that did.
		if !e.listWarned {
			e.listWarned = true
			e.log.Warn("audit: list the kernel's rules to check the witness's are in place", "err", err.Error())
		}
		return
	}
	e.listWarned = false
	gone := e.absent(listed)
	if len(gone) == 0 {
		e.inPlace(&e.removed, now)
		return
	}
	var where []string
	var refused []error
	for _, i := range gone {
		r := &e.rules[i]
		where = append(where, r.where)
		switch err := e.ctl.addRule(r.load); {
		case err == nil:
			r.owned = true
		case errors.Is(err, syscall.EEXIST):
			// Added back by someone else since the listing: theirs.
			r.owned = false
		default:
			refused = append(refused, fmt.Errorf("re-add the rule of %s: %w", r.where, err))
		}
	}
	// The first refusal says why; a locked configuration refuses every
	// rule alike, so the others are counted, not repeated.
	var refusal error
	if len(refused) > 0 {
		refusal = refused[0]
		if len(refused) > 1 {
			refusal = fmt.Errorf("%w (and %d more rules)", refused[0], len(refused)-1)
		}
	}
	e.saveOwned()
	e.missing(&e.removed, len(gone), refusal, where, now)
}

// absent returns the relied rules the listing lacks, by index.
func (e *Engine) absent(listed []ruleData) []int {
	present := make([]bool, len(e.rules))
	for _, k := range listed {
		for _, i := range e.byForm[indexOf(k)] {
			if !present[i] && e.rules[i].listed.equal(k) {
				present[i] = true
				break
			}
		}
	}
	var gone []int
	for i, p := range present {
		if !p {
			gone = append(gone, i)
		}
	}
	return gone
}

// missing states what a check found missing: n rules not in effect, err
// nil when the restore worked, where the rules files' locations of the
// rules concerned (nil: all of them, auditing was off).
func (e *Engine) missing(b *blindness, n int, err error, where []string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	found := !b.open
	if found {
		b.count = n
	} else {
		b.count = max(b.count, n)
	}
	what := []any{"since", b.good.UTC().Format(time.RFC3339Nano)}
	if where != nil {
		what = append(what, "rules", strings.Join(where, ", "))
	}
	if err != nil {
		if found {
			b.open, b.err = true, err.Error()
			e.gapLocked(b.window(now))
			e.log.Warn("audit: "+blindWhat[b.reason]+"; the restore was refused and is retried every second: the witness records nothing of it until then",
				append(what, "err", err.Error())...)
		}
		return
	}
	g := b.window(now)
	g.err = ""
	e.gapLocked(g)
	if found {
		e.log.Warn("audit: "+blindWhat[b.reason]+"; the witness restored it, and the sessions' records hold the window as a gap", what...)
	} else {
		e.log.Warn("audit: "+blindWhat[b.reason]+"; the witness restored it at last", what...)
	}
	e.stats.Rules = e.ownedRules()
	b.open, b.err, b.count, b.good = false, "", 0, now
}

// inPlace states a check that found b in place: the end of a window open
// since a refused restore (someone else restored it), or simply now.
func (e *Engine) inPlace(b *blindness, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b.open {
		g := b.window(now)
		g.err = ""
		e.gapLocked(g)
		e.log.Warn("audit: "+blindWhat[b.reason]+"; it is in place again, restored by someone else", "since", b.good.UTC().Format(time.RFC3339Nano))
		b.open, b.err, b.count = false, "", 0
	}
	b.good = now
}

// blindWhat words each window's reason for the log.
var blindWhat = map[string]string{
	vocab.GapAuditDisabled:     "the kernel's auditing was turned off while the witness relied on it",
	vocab.GapAuditRulesRemoved: "rules the witness relies on were removed from the kernel",
}

// openWindows returns the gap records of the windows open now. Callers hold mu.
func (e *Engine) openWindows(now time.Time) []gapRecord {
	var gs []gapRecord
	for _, b := range []*blindness{&e.disabled, &e.removed, &e.relayDown} {
		if b.open {
			gs = append(gs, b.window(now))
		}
	}
	return gs
}

// ownedRules counts the rules the engine added. Callers hold mu or run
// before the loop starts.
func (e *Engine) ownedRules() int {
	n := 0
	for _, r := range e.rules {
		if r.owned {
			n++
		}
	}
	return n
}
