package audit

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// crash stops e as a SIGKILL would: the loop ends and the sockets close,
// and nothing is removed from the kernel.
func crash(e *Engine) {
	e.stop.Store(true)
	<-e.done
	e.mc.Close()
	e.ctl.Close()
}

// TestLiveRulesLeftByACrashAreRemovedByTheNextRun: a witness killed before
// its stop leaves its rules in the kernel; the next run finds them loaded,
// knows them for its own by the owned-rules file, and removes them at its
// stop: the kernel's list is back to what it was before either.
func TestLiveRulesLeftByACrashAreRemovedByTheNextRun(t *testing.T) {
	ctl := requireAudit(t)
	rs, err := ParseRules(strings.NewReader(fmt.Sprintf(labRules, t.TempDir())), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	before, err := ctl.listRules()
	if err != nil {
		t.Fatal(err)
	}
	owned := filepath.Join(t.TempDir(), "audit-rules-owned")
	cfg := Config{Root: t.TempDir(), Rules: rs, Limits: liveLimits, Log: slog.New(slog.DiscardHandler), OwnedRules: owned}
	first, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ownedByFirst := first.ownedRules()
	crash(first)
	left, _ := ctl.listRules()
	if len(left) <= len(before) {
		t.Fatalf("after the crash the kernel lists %d rules, before %d: nothing was left to test", len(left), len(before))
	}
	t.Cleanup(func() { // the rules, should the test fail before the second run removes them
		for _, r := range append(rs.Rules, procacctRules()...) {
			ctl.delRule(r.kernelForm())
		}
	})
	if b, err := os.ReadFile(owned); err != nil || ownedByFirst == 0 || strings.Count(string(b), "\n") != ownedByFirst {
		t.Fatalf("owned-rules file after the crash: %q, %v; want %d digests", b, err, ownedByFirst)
	}
	second, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := second.Stats().Rules; n != ownedByFirst {
		t.Errorf("the second run owns %d rules, want the first run's %d", n, ownedByFirst)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if after, _ := ctl.listRules(); len(after) != len(before) {
		t.Errorf("rules before the witness: %d, after the second run stopped: %d", len(before), len(after))
	}
	if _, err := os.Stat(owned); !os.IsNotExist(err) {
		t.Errorf("the owned-rules file outlives the rules (%v)", err)
	}
}
