package audit

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/witness/witnessfs"
)

// fakeKernel is the kernel's audit as the engine sees it through kernel:
// a status and a rule list. Like the kernel, it lists a rule in its own
// form (the syscall class bits of the mask cleared), refuses a rule it
// has (EEXIST) and any change while locked (enabled=2, EPERM).
type fakeKernel struct {
	st    status
	rules []ruleData
	adds  int
}

func listedForm(d ruleData) ruleData {
	d.fields = slices.Clone(d.fields)
	d.mask[bitmaskWords-1] &= 1<<(32-syscallClasses) - 1
	return d
}

func (k *fakeKernel) status() (status, error) { return k.st, nil }

func (k *fakeKernel) set(mask, enabled, backlog uint32) error {
	if k.st.Enabled == 2 {
		return syscall.EPERM
	}
	if mask&statusEnabled != 0 {
		k.st.Enabled = enabled
	}
	if mask&statusBacklog != 0 {
		k.st.BacklogLimit = backlog
	}
	return nil
}

func (k *fakeKernel) addRule(d ruleData) error {
	if k.st.Enabled == 2 {
		return syscall.EPERM
	}
	if k.has(d) >= 0 {
		return syscall.EEXIST
	}
	k.adds++
	k.rules = append(k.rules, listedForm(d))
	return nil
}

func (k *fakeKernel) delRule(d ruleData) error {
	if k.st.Enabled == 2 {
		return syscall.EPERM
	}
	i := k.has(d)
	if i < 0 {
		return syscall.ENOENT
	}
	k.rules = slices.Delete(k.rules, i, i+1)
	return nil
}

func (k *fakeKernel) has(d ruleData) int {
	return slices.IndexFunc(k.rules, func(l ruleData) bool { return listedForm(d).equal(l) })
}

func (k *fakeKernel) listRules() ([]ruleData, error) { return slices.Clone(k.rules), nil }
func (k *fakeKernel) Close() error                   { return nil }

// watchRig is an engine on a fake kernel with the lab's rules loaded (one
// of them found loaded, someone else's), and a clock the test advances.
type watchRig struct {
	t       *testing.T
	k       *fakeKernel
	e       *Engine
	root    string
	logBuf  *testutil.LockedBuffer
	now     time.Time
	foreign ruleData // the rule someone else had loaded
}

func newWatchRig(t *testing.T) *watchRig {
	rs, err := ParseRules(strings.NewReader(`-a always,exit -F arch=b64 -S execve -k aptl_exec
-a always,exit -F arch=b64 -S connect -k aptl_net
-a always,exit -F arch=b64 -k aptl_all
`), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	// Auditing is on, someone else's: the engine owns it only once it
	// turns it on again.
	k := &fakeKernel{st: status{Enabled: 1, BacklogLimit: 64}}
	r := &watchRig{t: t, k: k, root: t.TempDir(), logBuf: &testutil.LockedBuffer{}, now: time.Unix(1796112666, 0)}
	r.foreign = rs.Rules[1].kernelForm()
	k.rules = append(k.rules, listedForm(r.foreign))
	// The rule without -S has every bit of the mask set, class bits
	// included, which the kernel lists cleared: a check that compared the
	// form the engine sent would find it missing at every poll.
	if all := rs.Rules[2].kernelForm(); listedForm(all).equal(all) {
		t.Fatal("the fake kernel lists the every-syscall rule as it was sent; the test would not see a comparison of sent forms")
	}
	r.e = newEngine(k, slog.New(slog.NewTextHandler(r.logBuf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err := r.e.prepareKernel(k.st, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.e.loadRules(append(rs.Rules, rs.Rules[0])); err != nil { // a repeated line is relied on once
		t.Fatal(err)
	}
	if err := r.e.learnListedForms(r.now); err != nil {
		t.Fatal(err)
	}
	if err := r.e.openFiles(Config{Root: r.root, Limits: Limits{RotateBytes: 1 << 20, Files: 2}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.e.ctl != nil {
			r.e.release()
		}
	})
	// No reader runs: everything the kernel sent is read, so a closing
	// session does not wait for one. Its poll (detach) reads the rig's clock.
	r.e.settledAt = time.Now().Add(time.Hour)
	r.e.now = func() time.Time { return r.now }
	if len(r.e.rules) != 3 || r.e.ownedRules() != 2 || len(k.rules) != 3 {
		t.Fatalf("relied on %d rules (%d owned), the kernel lists %d; want 3 (2 owned) and 3", len(r.e.rules), r.e.ownedRules(), len(k.rules))
	}
	return r
}

// poll advances the clock by d and runs the engine's status poll.
func (r *watchRig) poll(d time.Duration) time.Time {
	r.now = r.now.Add(d)
	r.e.pollStatus(r.now)
	return r.now
}

// session opens a recorder session whose audit witness is the rig's engine's.
func (r *watchRig) session(id string, signer gossh.Signer) (*recorder.Session, *witness) {
	r.t.Helper()
	src := &capturingSource{Source: NewSource(Limits{RotateBytes: 1 << 20, Files: 4}, r.e.log, "")}
	src.SetEngine(r.e, "")
	s, err := recorder.Create(r.root, recorder.Meta{RunID: "run-watch", SessionID: id}, recorder.Options{Signer: signer, Witnesses: []recorder.WitnessSource{src}})
	if err != nil {
		r.t.Fatal(err)
	}
	return s, src.ws[0].(*witness)
}

// pending returns the gap records w holds, as it would emit them.
func pendingGaps(w *witness) []map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []map[string]string
	for _, g := range w.gaps {
		out = append(out, g.attrs())
	}
	return out
}

func wantWindow(t *testing.T, what string, got map[string]string, reason string, first, last time.Time, count int, refused bool) {
	t.Helper()
	if got[vocab.AttrReason] != reason || got[vocab.AttrStream] != vocab.StreamAudit ||
		got[vocab.AttrFirst] != witnessfs.Stamp(first) || got[vocab.AttrLast] != witnessfs.Stamp(last) ||
		got[vocab.AttrCount] != strconv.Itoa(count) || (got[vocab.AttrError] != "") != refused {
		t.Errorf("%s: gap %v; want %s from %s to %s, count %d, refused %v", what, got, reason, witnessfs.Stamp(first), witnessfs.Stamp(last), count, refused)
	}
}

// TestKernelWatchRestoresAndStatesWindows: rules removed and auditing
// turned off behind the engine's back are restored at the next poll and
// stated as gap windows, from the last check that found them in place; a
// refused restore is stated at once with its error, retried every poll
// without a warning each time, stated to a session that starts or ends
// while it is open, and stated whole when it ends; the sessions' records
// carry every window to verify's report.
func TestKernelWatchRestoresAndStatesWindows(t *testing.T) {
	r := newWatchRig(t)
	k, e := r.k, r.e
	signer := gossh.Signer(testutil.NewSigner())
	s1, w1 := r.session("s1", signer)

	// In place: polls state nothing and add nothing.
	var good time.Time
	for range 3 {
		good = r.poll(time.Second)
	}
	if g := pendingGaps(w1); len(g) != 0 || k.adds != 2 {
		t.Fatalf("steady state: gaps %v, %d rules added; want none and the 2 of the start", g, k.adds)
	}

	// Someone else's rule is removed (its owner stopped): re-added, the
	// engine's own now, and the window stated.
	if err := k.delRule(r.foreign); err != nil {
		t.Fatal(err)
	}
	removedAt := r.poll(time.Second)
	if k.has(r.foreign) < 0 || !e.rules[1].owned || e.Stats().Rules != 3 {
		t.Errorf("the removed rule: listed at %d, owned %v, stats %d rules; want it back, owned, 3", k.has(r.foreign), e.rules[1].owned, e.Stats().Rules)
	}
	// Auditing turned off: turned on again, the window stated with every rule.
	k.st.Enabled = 0
	disabledAt := r.poll(time.Second)
	if k.st.Enabled != 1 || !e.ownsEnabled || r.logBuf.String() == "" {
		t.Errorf("auditing: enabled=%d, owned %v; want 1, owned", k.st.Enabled, e.ownsEnabled)
	}
	gaps := pendingGaps(w1)
	if len(gaps) != 2 {
		t.Fatalf("after a removal and a disable: gaps %v, want 2", gaps)
	}
	wantWindow(t, "removed rule", gaps[0], vocab.GapAuditRulesRemoved, good, removedAt, 1, false)
	wantWindow(t, "auditing off", gaps[1], vocab.GapAuditDisabled, removedAt, disabledAt, 3, false)

	// Every rule removed and the configuration locked: the restore is
	// refused, stated with its error, and retried every poll.
	k.rules = nil
	k.st.Enabled = 2
	lockedAt := r.poll(time.Second)
	r.poll(time.Second)
	s2, w2 := r.session("s2", signer) // starts inside the open window
	r.poll(time.Second)
	s3, _ := r.session("s3", signer)
	if err := s3.Close(0); err != nil { // ends inside the open window
		t.Fatal(err)
	}
	if k.adds != 3 || len(k.rules) != 0 {
		t.Errorf("locked: %d adds, %d rules listed; want 3 (none while locked), 0", k.adds, len(k.rules))
	}
	gaps = pendingGaps(w1)
	if len(gaps) != 3 {
		t.Fatalf("while locked: gaps %v, want 3 (one at the refusal, none per retry)", gaps)
	}
	wantWindow(t, "refused", gaps[2], vocab.GapAuditRulesRemoved, disabledAt, lockedAt, 3, true)
	if !strings.Contains(gaps[2][vocab.AttrError], "operation not permitted") || !strings.Contains(gaps[2][vocab.AttrError], "lab.rules:") {
		t.Errorf("refused window's error %q: want the rule's location and the kernel's refusal", gaps[2][vocab.AttrError])
	}
	if g := pendingGaps(w2); len(g) != 1 || g[0][vocab.AttrError] == "" || g[0][vocab.AttrFirst] != witnessfs.Stamp(disabledAt) {
		t.Errorf("a session started in the open window: gaps %v; want the window so far, refused", g)
	}
	if n := strings.Count(r.logBuf.String(), "the restore was refused"); n != 1 {
		t.Errorf("the refusal was warned about %d times over 3 polls, want once:\n%s", n, r.logBuf.String())
	}

	// Unlocked: restored at the next poll, and the window stated whole.
	k.st.Enabled = 1
	restoredAt := r.poll(time.Second)
	if len(k.rules) != 3 {
		t.Errorf("after the unlock the kernel lists %d rules, want 3", len(k.rules))
	}
	gaps = pendingGaps(w1)
	if len(gaps) != 4 {
		t.Fatalf("after the restore: gaps %v, want 4", gaps)
	}
	wantWindow(t, "restored", gaps[3], vocab.GapAuditRulesRemoved, disabledAt, restoredAt, 3, false)
	if !strings.Contains(r.logBuf.String(), "restored it at last") {
		t.Errorf("the restore after a refusal was not logged:\n%s", r.logBuf.String())
	}
	if strings.Contains(r.logBuf.String(), "aptl_exec") || strings.Contains(r.logBuf.String(), "execve") {
		t.Errorf("the log holds rule text:\n%s", r.logBuf.String())
	}
	r.poll(time.Second)
	if g := pendingGaps(w1); len(g) != 4 {
		t.Errorf("a poll after the restore added gaps: %v", g[4:])
	}

	// The records: verify reports each window with its instants and error.
	for _, s := range []*recorder.Session{s1, s2} {
		if err := s.Close(0); err != nil {
			t.Fatal(err)
		}
	}
	keys := evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}
	rep := evidence.Verify(s1.Dir(), keys, evidence.Options{})
	if !rep.OK() || len(rep.Gaps) != 4 {
		t.Fatalf("verify s1: ok=%v gaps %+v anomalies %v", rep.OK(), rep.Gaps, rep.Anomalies)
	}
	if g := rep.Gaps[2]; g.Reason != vocab.GapAuditRulesRemoved || g.First != witnessfs.Stamp(disabledAt) || g.Last != witnessfs.Stamp(lockedAt) || g.Count != 3 || g.Error == "" {
		t.Errorf("verify s1's refused window: %+v", g)
	}
	rep = evidence.Verify(s3.Dir(), keys, evidence.Options{})
	if !rep.OK() || len(rep.Gaps) != 2 || rep.Gaps[1].Error == "" || rep.Gaps[1].Last == rep.Gaps[0].Last {
		t.Errorf("a session closed in the open window: gaps %+v; want the window at its start and again, refused, at its close", rep.Gaps)
	}
	gapsLog, err := os.ReadFile(filepath.Join(r.root, vocab.AuditRootDir, "gaps.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(gapsLog, []byte("\n")); n != 4 || !bytes.Contains(gapsLog, []byte("reason=audit-disabled count=3 first=")) || !bytes.Contains(gapsLog, []byte(`error="re-add the rule of lab.rules:`)) {
		t.Errorf("gaps.log: %d lines, want 4 (removed, disabled, refused, restored):\n%s", n, gapsLog)
	}

	// At stop the engine removes every rule it added, the restored one
	// included, and turns auditing off again: no rule remains.
	if err := e.release(); err != nil {
		t.Fatal(err)
	}
	e.ctl = nil
	if len(k.rules) != 0 || k.st.Enabled != 0 {
		t.Errorf("after stop: %d rules listed, enabled=%d; want 0 and 0", len(k.rules), k.st.Enabled)
	}
}

// TestKernelWatchRestoredBySomeoneElse: a window whose restore was
// refused ends when a check finds the rule in place again, restored by
// someone else; it is stated whole, and the rule stays theirs.
func TestKernelWatchRestoredBySomeoneElse(t *testing.T) {
	r := newWatchRig(t)
	k := r.k
	_, w := r.session("s1", testutil.NewSigner())
	good := r.poll(time.Second)
	k.rules = slices.DeleteFunc(k.rules, func(l ruleData) bool { return listedForm(r.foreign).equal(l) })
	k.st.Enabled = 2
	refusedAt := r.poll(time.Second)
	k.st.Enabled = 1
	k.rules = append(k.rules, listedForm(r.foreign)) // its owner loaded it again
	k.st.Enabled = 2
	backAt := r.poll(time.Second)
	gaps := pendingGaps(w)
	if len(gaps) != 2 {
		t.Fatalf("gaps %v, want the refused window and its end", gaps)
	}
	wantWindow(t, "refused", gaps[0], vocab.GapAuditRulesRemoved, good, refusedAt, 1, true)
	wantWindow(t, "ended", gaps[1], vocab.GapAuditRulesRemoved, good, backAt, 1, false)
	if r.e.rules[1].owned {
		t.Error("a rule its owner loaded again became the engine's")
	}
	if !strings.Contains(r.logBuf.String(), "restored by someone else") {
		t.Errorf("the end of the window was not logged:\n%s", r.logBuf.String())
	}
}

// TestKernelWatchSessionClosingBeforeThePoll: every rule is removed after
// a poll that found them in place, and a session closes before the next
// poll. Its close polls once more, while it is still open: its record
// holds the window, and the rules are back.
func TestKernelWatchSessionClosingBeforeThePoll(t *testing.T) {
	r := newWatchRig(t)
	signer := gossh.Signer(testutil.NewSigner())
	s1, _ := r.session("s1", signer)
	good := r.poll(time.Second)
	r.k.rules = nil
	r.now = r.now.Add(300 * time.Millisecond)
	if err := s1.Close(0); err != nil {
		t.Fatal(err)
	}
	rep := evidence.Verify(s1.Dir(), evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}, evidence.Options{})
	if !rep.OK() || len(rep.Gaps) != 1 {
		t.Fatalf("verify: ok=%v gaps %+v anomalies %v; want one gap", rep.OK(), rep.Gaps, rep.Anomalies)
	}
	if g := rep.Gaps[0]; g.Reason != vocab.GapAuditRulesRemoved || g.First != witnessfs.Stamp(good) || g.Last != witnessfs.Stamp(r.now) || g.Count != 3 {
		t.Errorf("the window: %+v; want %s from %s to %s, 3 rules", g, vocab.GapAuditRulesRemoved, witnessfs.Stamp(good), witnessfs.Stamp(r.now))
	}
	if len(r.k.rules) != 3 {
		t.Errorf("the kernel lists %d rules after the close's poll; want the 3 restored", len(r.k.rules))
	}
}

// TestCatchUpTimeoutIsAGap: a session whose close finds the engine not
// settled past its end within catchUpBound (the reader behind, or stuck)
// leaves with an audit-catch-up-timeout gap from its start (the engine
// had settled before it) to its end.
func TestCatchUpTimeoutIsAGap(t *testing.T) {
	r := newWatchRig(t)
	signer := gossh.Signer(testutil.NewSigner())
	s1, w1 := r.session("s1", signer)
	r.e.mu.Lock()
	r.e.settledAt = time.Now().Add(-time.Hour)
	r.e.mu.Unlock()
	w1.mu.Lock()
	started := w1.startedAt
	w1.mu.Unlock()
	if err := s1.Close(0); err != nil {
		t.Fatal(err)
	}
	rep := evidence.Verify(s1.Dir(), evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}, evidence.Options{})
	if !rep.OK() || len(rep.Gaps) != 1 {
		t.Fatalf("verify: ok=%v gaps %+v anomalies %v; want one gap", rep.OK(), rep.Gaps, rep.Anomalies)
	}
	g := rep.Gaps[0]
	last, err := time.Parse(time.RFC3339Nano, g.Last)
	if g.Reason != vocab.GapAuditCatchUp || g.First != witnessfs.Stamp(started) || err != nil || !last.After(started) {
		t.Errorf("gap %+v; want %s from the session's start %s to its end", g, vocab.GapAuditCatchUp, witnessfs.Stamp(started))
	}
}

// noURingKernel is a kernel before 5.16: it refuses a rule of the
// io_uring list (EINVAL) and takes the rest.
type noURingKernel struct{ fakeKernel }

func (k *noURingKernel) addRule(d ruleData) error {
	if d.flags == filterURingExit {
		return syscall.EINVAL
	}
	return k.fakeKernel.addRule(d)
}

// TestKernelWithoutTheURingList: on a kernel that refuses the io_uring
// list the other rules load and are relied on, the io_uring rule is left
// out with a warning, and the stats say audit_uring=unsupported; where the
// kernel takes it, ok; a rules file without one, none.
func TestKernelWithoutTheURingList(t *testing.T) {
	rs, err := ParseRules(strings.NewReader("-a always,exit -F arch=b64 -S execve -k aptl_exec\n-a always,io_uring -S connect,openat -k aptl_uring\n"), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		k      kernel
		rules  []Rule
		want   string
		relied int
	}{
		{"no io_uring list", &noURingKernel{fakeKernel{st: status{Enabled: 1}}}, rs.Rules, "unsupported", 1},
		{"with the list", &fakeKernel{st: status{Enabled: 1}}, rs.Rules, "ok", 2},
		{"no io_uring rule", &fakeKernel{st: status{Enabled: 1}}, rs.Rules[:1], "none", 1},
	} {
		logBuf := &testutil.LockedBuffer{}
		e := newEngine(c.k, slog.New(slog.NewTextHandler(logBuf, nil)))
		e.want = c.rules
		if c.want != "none" && e.Stats().URing != "unknown" {
			t.Errorf("%s: before the rules are loaded audit_uring=%s, want unknown", c.name, e.Stats().URing)
		}
		if err := e.loadRules(c.rules); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := e.learnListedForms(time.Now()); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		e.attached = true // as attachKernel, whose steps these are
		if st := e.Stats(); st.URing != c.want || len(e.rules) != c.relied {
			t.Errorf("%s: audit_uring=%s with %d rules relied on, want %s and %d", c.name, st.URing, len(e.rules), c.want, c.relied)
		}
		if warned := strings.Contains(logBuf.String(), "no io_uring audit list"); warned != (c.want == "unsupported") {
			t.Errorf("%s: warned %v:\n%s", c.name, warned, logBuf)
		}
	}
}
