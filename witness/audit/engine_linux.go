package audit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/auditnetlink"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/witness/auditrelay"
)

// The engine: one control socket that loads the rules and polls the
// kernel's status, and one multicast socket on which every record arrives.
// One goroutine reads, assembles events and hands each to the witnesses
// of its audit session.
//
// Scope, chosen here: every rule is loaded once, with the condition
// "loginuid is set" (ruledata.go, scopeField), and events are demultiplexed
// in user space by ses to the sessions the broker bound. The alternative,
// one set of rules per session with -F ses=N, would miss every event before
// the rules are in: the launch agent's process sets its loginuid and execs
// the shell before the sidecar learns the ses, so the shell's own exec (and
// anything a one-shot command does at once) would never be recorded. With
// one scoped set, such events wait in a bounded pending queue (per ses,
// pendingTTL, maxPendingEvents) until the ses is bound. The cost: processes
// of the host that have a loginuid (a real login on the host) also produce
// records, which the engine discards unread; daemons and container
// processes, whose loginuid is unset, produce none.

// Bounds of the pending queue of events whose ses is not bound yet.
const (
	pendingTTL         = 10 * time.Second
	maxPendingSessions = 256
	maxPendingEvents   = 1024
	// maxKnownSessions bounds the set of bound sessions remembered after
	// they close (their lingering processes still go to _audit/).
	maxKnownSessions = 1 << 16
	// pollEvery is the longest wait for records, so the loop notices stop
	// and completes lingering events; statusEvery is how often the
	// kernel's lost counter is read.
	pollEvery   = 50 * time.Millisecond
	statusEvery = time.Second
	readBuffer  = 1 << 16
)

// Config configures the engine.
type Config struct {
	Root   string // the capture root: _audit/ and _proc-acct/ are made in it
	Rules  *RuleSet
	Limits Limits // rotation of _audit/audit.log and _proc-acct/proc-acct.log
	Log    *slog.Logger
	// OwnedRules is a file of the sidecar's state where the engine keeps
	// the digests of the rules it owns (owned.go), so that rules a crash
	// left in the kernel are removed by the next run; "": not kept.
	OwnedRules string
	// Relay is the witness relay the engine reaches the kernel through,
	// where the sidecar cannot itself (the Compose pair); nil: the
	// kernel's audit netlink directly.
	Relay *auditrelay.Peer
}

// Stats are the engine's counts, for health and the log.
type Stats struct {
	Rules        int    // rules the engine loaded
	Sessions     int    // audit sessions bound
	Events       uint64 // events of bound sessions written
	Unattributed uint64 // events of sessions never bound, discarded
	Lost         uint64 // the kernel's lost counter's rise since start
	Overruns     uint64 // multicast buffer overflows
	// Relayed: the engine reaches the kernel through the witness relay;
	// RelayDown: it cannot now (auditd is degraded).
	Relayed, RelayDown bool
	// URing is the io_uring list's state: "ok" (the rules file's io_uring
	// rules are loaded), "unsupported" (the kernel has no io_uring list),
	// "none" (the file has no io_uring rule) or "unknown" (a relay never
	// reached yet: nothing is loaded).
	URing string
}

// kernel is what the engine asks of the kernel's audit: control, the
// audit netlink, or a unit test's kernel.
type kernel interface {
	status() (status, error)
	set(mask, enabled, backlogLimit uint32) error
	addRule(d ruleData) error
	delRule(d ruleData) error
	listRules() ([]ruleData, error)
	Close() error
}

// Engine is the audit witness's engine, shared by every session.
type Engine struct {
	ctl kernel
	mc  recordSource
	log *slog.Logger
	// want is the rules file's rules and the process accounting's, as
	// loaded at start (and restored after a relay's return); backlog the
	// file's -b.
	want    []Rule
	backlog uint32
	// relay is the witness relay's address, nil on a plain host
	// (relay_linux.go).
	relay *auditrelay.Peer
	// rules are the rules the engine relies on: those it loaded and those
	// it found loaded (kernelwatch_linux.go); byForm finds them by their
	// listed form. Only the loop changes them once it runs.
	rules  []reliedRule
	byForm map[listedIndex][]int
	undo   func() // restores the backlog limit start raised
	// ownedFile is Config.OwnedRules; earlier the digests it held at start.
	ownedFile string
	earlier   map[string]bool
	// released: the engine stopped, its rules removed (protected by
	// statusMu): a closing session's poll asks nothing more.
	released bool
	// intent are the digests of rules being added, kept in the
	// owned-rules file until the kernel's answer (owned.go).
	intent map[string]bool
	// lastAttempt is the loop's last attempt to reach the relay.
	lastAttempt time.Time
	// attached: the rules were loaded once (protected by mu); before
	// that, through a relay that was never reached, their state is unknown.
	attached bool
	// uringUnsupported: the kernel refused the rules file's io_uring rules
	// (no io_uring list); they are not relied on. Set by loadRules.
	uringUnsupported bool
	// ownsEnabled: the engine turned auditing on (at start, or after
	// someone turned it off), so it turns it off at stop if no rule remains.
	ownsEnabled bool
	listWarned  bool // a failed listing was warned about; cleared by one that works

	mu       sync.Mutex // protects what follows
	bound    map[uint32][]*witness
	known    map[uint32]bool
	moved    map[uint32][]uint32 // the sessions a bound session's processes moved to (moves.go)
	pending  map[uint32][]*Event
	pendAt   map[uint32]time.Time
	open     map[*witness]bool // started and not closed: they get every gap
	auditLog *rootLog
	procLog  *rootLog
	acct     *procAcct
	// execAudited: the loaded rules record every execve of a session's
	// processes, so a session's audit session can be confirmed on its
	// terminal (witness_linux.go, confirmation). Set by Start.
	execAudited bool
	gapsLog     *rootLog
	stats       Stats
	// settledAt is the instant before which every record the kernel
	// sent has been read and every event delivered (assembler.settled).
	settledAt time.Time

	// statusMu serializes pollStatus: the loop's, once a second, and a
	// closing session's (detach).
	statusMu sync.Mutex
	// now is the clock of a closing session's poll (detach); tests set it.
	now func() time.Time
	// disabled and removed are the checks of auditing on and of the
	// relied rules, relayDown the relay's reachability: their open windows
	// reach every session (attach, detach). Protected by mu.
	disabled, removed, relayDown blindness

	lostAt uint32
	stop   atomic.Bool
	done   chan struct{}
}

// Start loads the rules and starts reading. On a plain host it needs
// CAP_AUDIT_CONTROL (rules) and CAP_AUDIT_READ (the multicast group);
// without them it returns an error and loads nothing. With cfg.Relay it
// reaches the kernel through the witness relay instead (relay_linux.go),
// and needs no capability: a relay that is not there yet is a blind
// window from the start, and the engine connects when it comes.
func Start(cfg Config) (_ *Engine, err error) {
	e := newEngine(nil, cfg.Log)
	e.want = append(append([]Rule(nil), cfg.Rules.Rules...), procacctRules()...)
	e.backlog = cfg.Rules.Backlog
	e.execAudited = recordsExec(cfg.Rules.Rules)
	e.ownedFile = cfg.OwnedRules
	if e.earlier, err = readOwned(cfg.OwnedRules); err != nil {
		e.log.Warn("audit: the rules an earlier run owned are not known; any it left stay in the kernel", "err", err.Error())
		err = nil
	}
	// On failure, undo in reverse: whatever was added is removed.
	defer func() {
		if err != nil {
			e.release()
		}
	}()
	if cfg.Relay != nil {
		return e, e.startRelayed(cfg)
	}
	ctl, err := openControl()
	if err != nil {
		return nil, err
	}
	mc, err := auditnetlink.OpenMulticast()
	if err != nil {
		ctl.Close()
		return nil, err
	}
	if err := e.attachKernel(ctl, mc, time.Now()); err != nil {
		return nil, err
	}
	if err := e.openFiles(cfg); err != nil {
		return nil, err
	}
	go e.loop()
	return e, nil
}

// attachKernel takes ctl and mc as the engine's kernel: it checks the
// configuration is not locked, prepares the kernel, loads (or, after a
// relay's return, restores) the rules and learns their listed forms.
func (e *Engine) attachKernel(ctl kernel, mc recordSource, now time.Time) error {
	e.statusMu.Lock()
	defer e.statusMu.Unlock()
	e.ctl, e.mc = ctl, mc
	st, err := ctl.status()
	if err != nil {
		return fmt.Errorf("audit: read the kernel's audit status: %w", err)
	}
	if st.Enabled == 2 {
		return errors.New("audit: the kernel's audit configuration is locked (enabled=2); rules cannot be loaded")
	}
	if err := e.prepareKernel(st, e.backlog); err != nil {
		return err
	}
	if err := e.loadRules(e.want); err != nil {
		return err
	}
	if err := e.learnListedForms(now); err != nil {
		return err
	}
	if st, err = ctl.status(); err == nil {
		e.lostAt = st.Lost
	}
	e.mu.Lock()
	e.stats.Rules = e.ownedRules()
	e.attached = true
	e.mu.Unlock()
	return nil
}

// newEngine is an engine with no rules loaded and no files open.
func newEngine(ctl kernel, log *slog.Logger) *Engine {
	return &Engine{ctl: ctl, log: log, bound: map[uint32][]*witness{}, known: map[uint32]bool{}, moved: map[uint32][]uint32{},
		pending: map[uint32][]*Event{}, pendAt: map[uint32]time.Time{}, open: map[*witness]bool{},
		acct: newProcAcct(), done: make(chan struct{}), undo: func() {}, now: time.Now, intent: map[string]bool{}}
}

// prepareKernel enables auditing if it is off (syscall records need it;
// the daemon pid is never set) and raises the backlog limit to the rules
// file's -b. Both are restored at stop if nobody changed them meanwhile.
func (e *Engine) prepareKernel(st status, backlog uint32) error {
	if st.Enabled == 0 {
		if err := e.ctl.set(statusEnabled, 1, 0); err != nil {
			return fmt.Errorf("audit: enable auditing: %w", err)
		}
		e.log.Warn("audit: the kernel's auditing was off; the witness enabled it and turns it off at stop when no other rules remain")
		e.ownsEnabled = true
	}
	if backlog > st.BacklogLimit {
		if err := e.ctl.set(statusBacklog, 0, backlog); err != nil {
			return fmt.Errorf("audit: raise the backlog limit to %d: %w", backlog, err)
		}
		was := st.BacklogLimit
		e.undo = func() {
			if now, err := e.ctl.status(); err == nil && now.BacklogLimit == backlog {
				e.ctl.set(statusBacklog, 0, was)
			}
		}
	}
	return nil
}

// disableIfUnused turns auditing off again unless some rule remains (a
// host auditd's, or another witness's, which still needs it).
func (e *Engine) disableIfUnused() {
	rules, err := e.ctl.listRules()
	if err != nil || len(rules) > 0 {
		return
	}
	if st, err := e.ctl.status(); err == nil && st.Enabled == 1 && st.PID == 0 {
		e.ctl.set(statusEnabled, 0, 0)
	}
}

// loadRules adds each rule. A rule the kernel already has (EEXIST) is
// someone else's: it is used, not owned, and not removed at stop. Either
// way the engine relies on it (kernelwatch_linux.go). A rule that repeats
// an earlier one of the file is the same kernel rule, relied on once.
func (e *Engine) loadRules(rules []Rule) error {
	// Rules relied on before this call (the relay came back) are added
	// again: one still in place (EEXIST: the relay went, not the rule)
	// keeps its ownership; one that is gone is the engine's again.
	known := len(e.rules)
	restored := make([]bool, known)
next:
	for _, r := range rules {
		if r.Watch != "" {
			if fi, err := os.Stat(r.Watch); err == nil && fi.IsDir() {
				r.WatchDir = true
			}
			if known == 0 {
				e.log.Warn("audit: a watch resolves in the mount namespace of the process that adds the rule (serve's, or the witness relay's), not the workload's", "rule", r.Where, "path", r.Watch)
			}
		}
		d := r.kernelForm()
		for i, o := range e.rules {
			if !o.load.sameRule(d) {
				continue
			}
			if i < known && !restored[i] {
				restored[i] = true
				switch err := e.ctl.addRule(d); {
				case err == nil:
					e.rules[i].owned = true
				case errors.Is(err, syscall.EEXIST):
				default:
					return fmt.Errorf("audit: load the rule of %s again: %w", r.Where, err)
				}
			}
			continue next
		}
		// Its digest is in the owned-rules file before the add: an add whose
		// outcome is lost (the relay gone before its answer) is found
		// loaded by the next attempt, and known for the engine's.
		digest := ruleDigest(d)
		e.intent[digest] = true
		e.saveOwned()
		err := e.ctl.addRule(d)
		if !errors.Is(err, auditrelay.ErrDown) {
			delete(e.intent, digest) // the kernel answered: owned, or not
		}
		if r.URing && errors.Is(err, syscall.EINVAL) {
			// A kernel before 5.16 has no io_uring list: readiness says
			// so (audit_uring=unsupported), and the rest is witnessed.
			e.mu.Lock()
			warn := !e.uringUnsupported
			e.uringUnsupported = true
			e.mu.Unlock()
			if warn {
				e.log.Warn("audit: this kernel has no io_uring audit list (Linux 5.16+); io_uring operations are not witnessed: refuse io_uring to the workload (compose/kali/seccomp.json)", "rule", r.Where)
			}
			continue
		}
		if errors.Is(err, syscall.EEXIST) {
			if e.earlier[digest] || e.intent[digest] {
				e.log.Info("audit: rule left in the kernel by an earlier run of this sidecar, which stopped without removing it; it is removed at stop", "rule", r.Where)
				e.rules = append(e.rules, reliedRule{where: r.Where, load: d, owned: true})
				continue
			}
			e.log.Info("audit: rule already loaded by someone else; left in place at stop", "rule", r.Where)
			e.rules = append(e.rules, reliedRule{where: r.Where, load: d})
			continue
		}
		if err != nil {
			return fmt.Errorf("audit: load the rule of %s: %w", r.Where, err)
		}
		e.rules = append(e.rules, reliedRule{where: r.Where, load: d, owned: true})
		e.saveOwned()
	}
	e.saveOwned()
	return nil
}

func (e *Engine) openFiles(cfg Config) error {
	var err error
	if e.auditLog, err = openRootLog(cfg.Root, vocab.AuditRootDir, vocab.AuditLogFile, cfg.Limits); err != nil {
		return err
	}
	if e.gapsLog, err = openRootLog(cfg.Root, vocab.AuditRootDir, "gaps.log", cfg.Limits); err != nil {
		return err
	}
	e.procLog, err = openRootLog(cfg.Root, vocab.ProcAcctDir, vocab.ProcAcctFile, cfg.Limits)
	return err
}

// Close stops reading, removes the rules the engine added (only those),
// writes the lines of processes still followed and closes the files.
func (e *Engine) Close() error {
	if e.stop.Swap(true) {
		return nil
	}
	<-e.done
	return e.release()
}

func (e *Engine) release() error {
	// A session closing now polls the kernel too (detach): not any more.
	e.statusMu.Lock()
	defer e.statusMu.Unlock()
	e.released = true
	var errs []error
	for i := range e.rules {
		r := &e.rules[i]
		if e.ctl == nil || e.Stats().RelayDown {
			break // the relay is gone: the rules stay, as after a crash, and the file says so
		}
		if !r.owned {
			continue
		}
		if err := e.ctl.delRule(r.load); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("audit: remove the rule of %s it added: %w", r.where, err))
			continue
		}
		r.owned = false
	}
	e.saveOwned()
	e.rules = nil
	e.undo()
	if e.ownsEnabled && e.ctl != nil {
		e.disableIfUnused()
	}
	e.mu.Lock()
	if e.procLog != nil {
		errs = append(errs, e.procLog.write(e.acct.end()))
	}
	for _, l := range []*rootLog{e.auditLog, e.procLog, e.gapsLog} {
		if l != nil {
			errs = append(errs, l.sync(), l.close())
		}
	}
	e.mu.Unlock()
	if e.mc != nil {
		errs = append(errs, e.mc.Close())
	}
	if e.ctl != nil {
		errs = append(errs, e.ctl.Close())
	}
	return errors.Join(errs...)
}

// Stats returns the engine's counts.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.Sessions = len(e.known)
	s.Relayed, s.RelayDown = e.relay != nil, e.relayDown.open
	s.URing = "none"
	switch {
	case !e.attached && slices.ContainsFunc(e.want, func(r Rule) bool { return r.URing }):
		s.URing = "unknown"
	case e.uringUnsupported:
		s.URing = "unsupported"
	case slices.ContainsFunc(e.want, func(r Rule) bool { return r.URing }):
		s.URing = "ok"
	}
	return s
}

func (e *Engine) loop() {
	defer close(e.done)
	asm := newAssembler()
	buf := make([]byte, readBuffer)
	nextStatus := time.Now().Add(statusEvery)
	for !e.stop.Load() {
		if e.relay != nil && e.Stats().RelayDown {
			e.reconnect(time.Now())
			continue
		}
		data, err := e.mc.Read(buf, pollEvery)
		now := time.Now()
		if errors.Is(err, auditrelay.ErrDown) {
			e.lostRelay(err, now)
			continue
		}
		e.turn(asm, data, err, now)
		if now.After(nextStatus) {
			nextStatus = now.Add(statusEvery)
			e.pollStatus(now)
		}
	}
	e.deliver(asm.flush())
}

// turn takes the outcome of one read: a datagram, nothing (the socket
// was empty for pollEvery) or an error.
func (e *Engine) turn(asm *assembler, data []byte, err error, now time.Time) {
	idle := false
	switch {
	case errors.Is(err, errOverrun):
		e.gap(gapRecord{reason: vocab.GapAuditOverrun, count: overruns(err), at: now})
	case err != nil:
		e.log.Warn("audit: read records", "err", err.Error())
		time.Sleep(pollEvery)
	case data == nil:
		idle = true
	default:
		e.deliver(parseDatagram(asm, data, now))
	}
	// Events with no EOE (user messages, and other records outside a
	// syscall) are complete eventLinger after their last record. They are
	// expired on every turn, not only when the socket is found empty: on
	// a busy host it never is, and they would wait for the engine's stop
	// (TestLiveBusyHost).
	e.deliver(asm.expire(now))
	settled := asm.settled(idle, now)
	e.mu.Lock()
	e.settledAt = settled
	if s, ok := e.mc.(interface{ Settled() time.Time }); ok && !e.relayDown.open {
		// The relay's last idle frame: every record the kernel sent
		// before it has been read. Not now: records the relay had queued
		// when its connection ends are lost, and must be inside the window.
		if at := s.Settled(); at.After(e.relayDown.good) {
			e.relayDown.good = at
		}
	}
	e.mu.Unlock()
}

// parseDatagram adds the records of one datagram to the assembler. The
// kernel sends one record a datagram and does not pad the last message to
// the netlink alignment, which syscall.ParseNetlinkMessage requires, so
// the messages are walked here, each bounded by the datagram.
func parseDatagram(asm *assembler, data []byte, now time.Time) []*Event {
	var done []*Event
	for len(data) >= unix.NLMSG_HDRLEN {
		n := int(binary.NativeEndian.Uint32(data[0:]))
		typ := binary.NativeEndian.Uint16(data[4:])
		if n < unix.NLMSG_HDRLEN || n > len(data) {
			asm.malformed++
			return done
		}
		done = append(done, asm.add(typ, string(data[unix.NLMSG_HDRLEN:n]), now)...)
		data = data[min((n+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1), len(data)):]
	}
	return done
}

// pollStatus states a rise of the kernel's lost counter as a gap of every
// open session (any lost record may have been one of theirs), and checks
// that what the witness relies on is in place (checkKernel).
func (e *Engine) pollStatus(now time.Time) {
	e.statusMu.Lock()
	defer e.statusMu.Unlock()
	if e.released || e.Stats().RelayDown {
		return // nothing can be asked; the window says so
	}
	st, err := e.ctl.status()
	if errors.Is(err, auditrelay.ErrDown) {
		e.lostRelay(err, now)
		return
	}
	if err != nil {
		e.log.Warn("audit: read the kernel's audit status", "err", err.Error())
		return
	}
	if rise := st.Lost - e.lostAt; rise > 0 {
		e.lostAt = st.Lost
		e.gap(gapRecord{reason: vocab.GapAuditLost, count: uint64(rise), at: now})
	}
	e.checkKernel(st, now)
	e.expirePending(now)
}

func (e *Engine) gap(g gapRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gapLocked(g)
}

// gapLocked writes g to _audit/gaps.log and to every open session. Callers hold mu.
func (e *Engine) gapLocked(g gapRecord) {
	switch g.reason {
	case vocab.GapAuditLost:
		e.stats.Lost += g.count
	case vocab.GapAuditOverrun:
		e.stats.Overruns += g.count
	}
	if err := e.gapsLog.write(g.appendLine(nil)); err != nil {
		e.log.Warn("audit: write gaps.log", "err", err.Error())
	}
	for w := range e.open {
		w.gap(g)
	}
}

// deliver writes each event of a bound session, and queues those of an
// unbound one.
func (e *Engine) deliver(events []*Event) {
	if len(events) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range events {
		if ev == nil {
			continue
		}
		if ev.Ses == unsetID {
			ev.Ses = e.acct.uringSession(ev)
		}
		if from, to, moved := loginMove(ev); moved && e.known[from] && !e.known[to] {
			e.follow(from, to)
			ev.Ses = from
		}
		if ev.Ses == unsetID {
			continue
		}
		if e.known[ev.Ses] {
			e.write(ev)
			continue
		}
		e.queue(ev)
	}
}

// write stores a bound session's event. Callers hold mu.
func (e *Engine) write(ev *Event) {
	e.stats.Events++
	if err := e.auditLog.write(ev.AppendLog(nil)); err != nil {
		e.log.Warn("audit: write audit.log", "err", err.Error())
	}
	if line := e.acct.event(ev); len(line) > 0 {
		if err := e.procLog.write(line); err != nil {
			e.log.Warn("audit: write proc-acct.log", "err", err.Error())
		}
	}
	for _, w := range e.bound[ev.Ses] {
		w.deliver(ev)
	}
}

// queue keeps an unbound session's event until its ses is bound or
// pendingTTL passes. Callers hold mu.
func (e *Engine) queue(ev *Event) {
	q, ok := e.pending[ev.Ses]
	if !ok && len(e.pending) >= maxPendingSessions {
		e.stats.Unattributed++
		return
	}
	if len(q) >= maxPendingEvents {
		e.stats.Unattributed++
		return
	}
	if !ok {
		e.pendAt[ev.Ses] = time.Now()
	}
	e.pending[ev.Ses] = append(q, ev)
}

func (e *Engine) expirePending(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for ses, at := range e.pendAt {
		if now.Sub(at) > pendingTTL {
			e.stats.Unattributed += uint64(len(e.pending[ses]))
			delete(e.pending, ses)
			delete(e.pendAt, ses)
		}
	}
}

// bind attributes ses to w: its queued events are written at once.
func (e *Engine) bind(w *witness, ses uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.known) >= maxKnownSessions {
		clear(e.known)
		for s := range e.bound {
			e.known[s] = true
		}
	}
	e.known[ses] = true
	e.bound[ses] = append(e.bound[ses], w)
	for _, ev := range e.pending[ses] {
		e.write(ev)
	}
	delete(e.pending, ses)
	delete(e.pendAt, ses)
}

// follow binds to, the audit session a process of from moved to, to
// from's sessions (moves.go); events of to queued meanwhile are written.
// Callers hold mu.
func (e *Engine) follow(from, to uint32) {
	e.known[to] = true
	e.bound[to] = append(e.bound[to], e.bound[from]...)
	e.moved[from] = append(e.moved[from], to)
	for _, ev := range e.pending[to] {
		e.write(ev)
	}
	delete(e.pending, to)
	delete(e.pendAt, to)
}

// attach starts w's share; a blind window open now is w's first gap.
func (e *Engine) attach(w *witness) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.open[w] = true
	for _, g := range e.openWindows(time.Now()) {
		w.gap(g)
	}
}

// detach ends w's share once the engine has read and delivered what the
// kernel sent before end (bounded by catchUpBound).
func (e *Engine) detach(w *witness, ses uint32, end time.Time) {
	deadline := time.Now().Add(catchUpBound)
	var settled time.Time
	for {
		e.mu.Lock()
		settled = e.settledAt
		e.mu.Unlock()
		if settled.After(end) || !time.Now().Before(deadline) || e.stop.Load() || e.Stats().RelayDown {
			break
		}
		time.Sleep(pollEvery / 5)
	}
	// The loop polls the kernel's status once a second: a blind window or
	// a rise of the lost counter since its last poll may have begun
	// before end, and w would leave unaware of it. One more poll now,
	// while w is still open, states it in w's record too.
	if !e.stop.Load() {
		e.pollStatus(e.now())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !settled.After(end) {
		// What the kernel sent between the settled instant and end may
		// reach the engine after w has left.
		w.mu.Lock()
		first := w.startedAt
		w.mu.Unlock()
		if settled.After(first) {
			first = settled
		}
		w.gap(gapRecord{reason: vocab.GapAuditCatchUp, at: first, last: end})
	}
	// A blind window still open ends, for w, at its end (one that began
	// after it is not w's).
	for _, g := range e.openWindows(end) {
		if g.at.Before(end) {
			w.gap(g)
		}
	}
	delete(e.open, w)
	// w leaves its ses and every session its processes moved to.
	for todo := []uint32{ses}; len(todo) > 0; todo = todo[1:] {
		s := todo[0]
		ws := e.bound[s]
		for i, o := range ws {
			if o == w {
				e.bound[s] = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		todo = append(todo, e.moved[s]...)
		if len(e.bound[s]) == 0 {
			delete(e.bound, s)
			delete(e.moved, s)
		}
	}
}

// catchUpBound bounds how long a closing session waits for the reader.
const catchUpBound = time.Second

// String describes the engine for the log.
func (s Stats) String() string {
	return "rules=" + strconv.Itoa(s.Rules) + " sessions=" + strconv.Itoa(s.Sessions) +
		" events=" + strconv.FormatUint(s.Events, 10) + " lost=" + strconv.FormatUint(s.Lost, 10)
}

// recordsExec reports whether rules record every x86_64 execve of a
// session process: an always rule on the exit list for execve (or every
// syscall) whose only conditions are the architecture.
func recordsExec(rules []Rule) bool {
	execve := archSyscalls(archX8664)["execve"]
	for _, r := range rules {
		if r.Watch != "" || r.URing || r.Action != actionAlways || (r.Syscalls != nil && !slices.Contains(r.Syscalls, execve)) {
			continue
		}
		only := true
		for _, f := range r.Fields {
			only = only && f.ID == fieldArch && f.Op == opEqual && f.Value == archX8664
		}
		if only {
			return true
		}
	}
	return false
}

// recordsExec reports whether sessions' audit sessions are confirmed on
// their terminals (nil engine: no).
func (e *Engine) recordsExec() bool { return e != nil && e.execAudited }
