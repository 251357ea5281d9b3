package main

import (
	"context"
	"os/user"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/login"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/witness/audit"
)

// TestLocalLauncherAuditSessions: the local adapter of a server whose
// audit witness is off starts sessions without the login trampoline, and
// the record's note says so; with the audit class selected it goes
// through the trampoline (this test binary does not host it, so the note
// says that instead).
func TestLocalLauncherAuditSessions(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Skipf("no current user: %v", err)
	}
	for _, c := range []struct {
		name  string
		rules *audit.RuleSet
		off   bool
	}{{"audit off", nil, true}, {"audit on", &audit.RuleSet{}, false}} {
		t.Run(c.name, func(t *testing.T) {
			l, _, err := newLauncher(&serveConfig{launch: "local", auditRules: c.rules})
			if err != nil {
				t.Fatal(err)
			}
			spec, stdin, _, _ := testutil.PipeSpec(t, me.Username, "read x")
			p, err := l.Launch(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			stdin.Close()
			testutil.WaitExit(t, p)
			note := p.(launch.AuditNoter).AuditSessionNote()
			if (note == login.NoAuditWitness) != c.off {
				t.Errorf("note %q; the audit witness off: %v", note, c.off)
			}
		})
	}
}
