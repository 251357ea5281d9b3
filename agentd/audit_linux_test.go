package agentd

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch/launchtest"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

// TestMain makes the test binary host the login trampoline, as
// aptl-launch-agent's main does, so the agent's sessions here start
// through it.
func TestMain(m *testing.M) {
	login.TrampolineMain()
	os.Exit(m.Run())
}

// TestAgentReportsAuditSession: the ses the agent reports in its started
// reply is the one the session's processes have, with loginuid the user's
// uid, and the agent logs it.
func TestAgentReportsAuditSession(t *testing.T) {
	if b, err := os.ReadFile("/proc/self/loginuid"); err != nil || strings.TrimSpace(string(b)) != "4294967295" {
		t.Skipf("this test's loginuid is set (%q, %v): its children cannot get a fresh audit session without CAP_AUDIT_CONTROL", b, err)
	}
	ta := newTestAgent(t, nil)
	spec, stdin, stdout, _ := launchtest.PipeSpec(t, "tester", "cat /proc/self/sessionid; echo; cat /proc/self/loginuid; echo")
	stdin.Close()
	p, err := ta.agent.Launch(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(testutil.RecvString(t, "stdout", testutil.ReadAllAsync(stdout)))
	launchtest.WaitExit(t, p)
	ses, ok := p.AuditSession()
	if !ok {
		t.Fatalf("no audit session reported; the agent's log:\n%s", ta.logs.String())
	}
	want := []string{strconv.FormatUint(uint64(ses), 10), strconv.Itoa(os.Geteuid())}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the session's child has sessionid, loginuid %q; want %q (the reported ses, the user's uid)", got, want)
	}
	if !strings.Contains(ta.logs.String(), `"audit_ses":`+want[0]) {
		t.Errorf("the agent's log does not name audit session %s:\n%s", want[0], ta.logs.String())
	}
}
