package local

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/launch/launchtest"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

// TestLocalAuditSession: a session the local adapter starts (through the
// trampoline TestMain hosts) has its own audit session, which AuditSession
// reports and /proc/<pid>/sessionid confirms.
func TestLocalAuditSession(t *testing.T) {
	if b, err := os.ReadFile("/proc/self/loginuid"); err != nil || strings.TrimSpace(string(b)) != "4294967295" {
		t.Skipf("this test's loginuid is set (%q, %v): its children cannot get a fresh audit session", b, err)
	}
	l, _ := testLocal(t)
	spec, stdin, _, _ := launchtest.PipeSpec(t, "tester", "read x")
	p, err := l.Launch(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	ses, ok := p.AuditSession()
	b, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/sessionid", p.(*login.Process).Pid()))
	stdin.Close()
	launchtest.WaitExit(t, p)
	if !ok || rerr != nil || strings.TrimSpace(string(b)) != fmt.Sprint(ses) {
		t.Errorf("AuditSession = %d, %v (note %q); /proc sessionid %q, %v", ses, ok, p.(*login.Process).AuditSessionNote(), b, rerr)
	}
}
