package audit

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestLiveRulesRemovedAndAuditingOff: while a session runs, someone with
// CAP_AUDIT_CONTROL (here the test, through its own control socket, as
// auditctl -d and auditctl -e 0 would) removes the witness's exec rule
// and turns auditing off. The engine notices at its next status poll,
// turns auditing on and adds the rule again; the session's integrity log
// holds both windows as gap records, the rule is in the kernel's list
// again, and the session's exec after the restore is in its audit file
// (the exec rule is the only one that records it, so it proves the rule
// is back in effect). At stop the engine removes the rule it re-added.
func TestLiveRulesRemovedAndAuditingOff(t *testing.T) {
	ctl := requireAudit(t)
	root := t.TempDir()
	rs, err := ParseRules(strings.NewReader(fmt.Sprintf(labRules, t.TempDir())), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	before, err := ctl.listRules()
	if err != nil {
		t.Fatal(err)
	}
	logBuf := &testutil.LockedBuffer{}
	log := slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	eng, sess, _, signer := liveSession(t, root, rs, log, "blinded")
	// The session process waits for the test's go-ahead, then execs the
	// marker; it gives up after 20 s.
	goAhead := filepath.Join(t.TempDir(), "go")
	ses, wait := sessionProcess(t, 4245, fmt.Sprintf(`for i in $(seq 400); do [ -e %q ] && break; sleep 0.05; done; /bin/echo marker-after-restore >/dev/null`, goAhead))
	if err := sess.BindAuditSession(ses); err != nil {
		t.Fatal(err)
	}

	execRule := rs.Rules[0].kernelForm()
	if execRule.key() != "aptl_exec" {
		t.Fatalf("the lab's first rule has key %q, the test expects the exec rule", execRule.key())
	}
	if err := ctl.delRule(execRule); err != nil {
		t.Fatalf("remove the witness's exec rule: %v", err)
	}
	if err := ctl.set(statusEnabled, 0, 0); err != nil {
		t.Fatalf("turn auditing off: %v", err)
	}
	// Both took effect (the engine polls once a second: it has seldom
	// restored them already).
	listed, enabled := kernelHolds(t, ctl, execRule)
	t.Logf("just after: exec rule listed %v, enabled=%d", listed, enabled)
	deadline := time.Now().Add(10 * time.Second)
	for listed, enabled = kernelHolds(t, ctl, execRule); !listed || enabled != 1; listed, enabled = kernelHolds(t, ctl, execRule) {
		if time.Now().After(deadline) {
			t.Fatalf("10 s on, the engine has not restored: exec rule listed %v, enabled=%d; log:\n%s", listed, enabled, logBuf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.WriteFile(goAhead, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wait()
	time.Sleep(300 * time.Millisecond)
	if err := sess.Close(0); err != nil {
		t.Fatal(err)
	}

	rep := evidence.Verify(sess.Dir(), evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}, evidence.Options{})
	if !rep.OK() {
		t.Fatalf("verify: %v", rep.Anomalies)
	}
	windows := map[string]evidence.Gap{}
	for _, g := range rep.Gaps {
		if g.Stream == vocab.StreamAudit && g.Last != "" {
			windows[g.Reason] = g
		}
	}
	for _, reason := range []string{vocab.GapAuditRulesRemoved, vocab.GapAuditDisabled} {
		g, ok := windows[reason]
		if !ok {
			t.Errorf("the session's record has no %s gap; gaps %+v", reason, rep.Gaps)
			continue
		}
		first, err1 := time.Parse(time.RFC3339Nano, g.First)
		last, err2 := time.Parse(time.RFC3339Nano, g.Last)
		if err1 != nil || err2 != nil || !first.Before(last) || last.Sub(first) > 3*statusEvery || g.Error != "" || g.Count < 1 {
			t.Errorf("%s gap %+v: want a window of at most %v, restored, with its rules counted", reason, g, 3*statusEvery)
		}
	}
	files, _ := filepath.Glob(filepath.Join(sess.Dir(), vocab.AuditDir, "audit-*.log"))
	if len(files) != 1 {
		t.Fatalf("session audit files: %v", files)
	}
	session, _ := os.ReadFile(files[0])
	if !bytes.Contains(session, []byte(`a1="marker-after-restore"`)) {
		t.Errorf("the session's exec after the restore is not in its audit file:\n%s", session)
	}
	gapsLog, _ := os.ReadFile(filepath.Join(root, vocab.AuditRootDir, "gaps.log"))
	for _, reason := range []string{vocab.GapAuditRulesRemoved, vocab.GapAuditDisabled} {
		if !bytes.Contains(gapsLog, []byte("reason="+reason+" ")) {
			t.Errorf("_audit/gaps.log has no %s line:\n%s", reason, gapsLog)
		}
	}
	if l := logBuf.String(); !strings.Contains(l, "were removed from the kernel") || !strings.Contains(l, "auditing was turned off") || strings.Contains(l, "aptl_exec") {
		t.Errorf("the log should warn of both, with no rule text:\n%s", l)
	}

	if err := eng.Close(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	after, err := ctl.listRules()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) || hasRule(after, execRule) {
		t.Errorf("rules before the witness: %d, after it stopped: %d (its re-added exec rule listed: %v)", len(before), len(after), hasRule(after, execRule))
	}
	t.Logf("windows: %+v", windows)
}

// kernelHolds reports whether the kernel lists d, and its enabled flag.
func kernelHolds(t *testing.T, ctl *control, d ruleData) (listed bool, enabled uint32) {
	t.Helper()
	rules, err := ctl.listRules()
	if err != nil {
		t.Fatal(err)
	}
	st, err := ctl.status()
	if err != nil {
		t.Fatal(err)
	}
	return hasRule(rules, d), st.Enabled
}

func hasRule(listed []ruleData, d ruleData) bool {
	for _, k := range listed {
		if d.sameRule(k) {
			return true
		}
	}
	return false
}
