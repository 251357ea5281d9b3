package agentclient

import (
	"net"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
)

// TestAgentAuditSession: the process's AuditSession is what the agent's
// started reply says; an agent that sends no audit fields (older than
// them), one that reports none, and one that reports the kernel's unset
// value give ok=false with a note that says why.
func TestAgentAuditSession(t *testing.T) {
	base := agentwire.StartedMsg{User: "tester", UID: 1000, GID: 1000, Home: "/home/tester", Shell: "/bin/sh", Note: "fake"}
	with := func(ses uint32, note string) agentwire.StartedMsg {
		m := base
		m.AuditSes, m.AuditNote, m.AuditReported = ses, note, true
		return m
	}
	for _, tt := range []struct {
		name     string
		started  agentwire.StartedMsg
		wantSes  uint32
		wantOK   bool
		wantNote string
	}{
		{"reported", with(4711, ""), 4711, true, ""},
		{"older agent", base, 0, false, "older than audit session reporting"},
		{"none, with the agent's reason", with(0, "the launcher's loginuid is already set (1000)"), 0, false,
			"launch agent: the launcher's loginuid is already set (1000)"},
		{"unset value", with(1<<32-1, ""), 0, false, "unset audit session id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			testutil.LeakCheck(t)
			p, fakeDone, err := startAgainstFake(t, func(t *testing.T, c *net.UnixConn) {
				agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, tt.started.Encode(), 0))
				agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeExit, agentwire.ExitMsg{}.Encode(), 0))
			})
			if err != nil {
				t.Fatalf("Launch: %v", err)
			}
			defer func() { <-fakeDone }()
			defer p.Wait()
			ses, ok := p.AuditSession()
			note := p.(launch.AuditNoter).AuditSessionNote()
			if ses != tt.wantSes || ok != tt.wantOK || !strings.Contains(note, tt.wantNote) || (tt.wantNote == "") != (note == "") {
				t.Errorf("AuditSession = %d, %v, note %q; want %d, %v, note containing %q", ses, ok, note, tt.wantSes, tt.wantOK, tt.wantNote)
			}
		})
	}
}
