package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestReadinessWithdrawnAtSignal: on SIGTERM the readiness file goes at
// once, while the shutdown still finalizes an open session, so a peer that
// watches it (compose/kali/aptl-agent-supervise) learns that the sidecar is
// stopping before it has stopped. The session's shell ignores the hangup,
// which keeps the shutdown busy for its kill grace.
func TestReadinessWithdrawnAtSignal(t *testing.T) {
	t.Parallel() // see parallel_test.go
	bin := buildForLiveTest(t)
	work := t.TempDir()
	ready := filepath.Join(work, "ready")
	srv, sshArgs, logs := startServe(t, bin, work, "--ready-file", ready)
	waitFor(t, 10*time.Second, "the readiness file", func() bool {
		_, err := os.Stat(ready)
		return err == nil
	})
	session := exec.Command("ssh", append(sshArgs, "-o", "BatchMode=yes", "trap '' HUP TERM INT; echo STARTED; sleep 20")...)
	out := &testutil.LockedBuffer{}
	session.Stdout, session.Stderr = out, out
	if err := session.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { session.Process.Kill(); session.Wait() })
	waitFor(t, 10*time.Second, "the session's shell", func() bool { return strings.Contains(out.String(), "STARTED") })

	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "the readiness file withdrawn after SIGTERM", func() bool {
		_, err := os.Stat(ready)
		return os.IsNotExist(err)
	})
	if strings.Contains(logs.String(), `msg=stopped`) {
		t.Fatalf("serve had stopped already: the test did not see the shutdown in progress\n%s", logs.String())
	}
	waitFor(t, 30*time.Second, "serve stopped", func() bool { return strings.Contains(logs.String(), "msg=stopped") })
	if !strings.Contains(logs.String(), "reason=sidecar-shutdown") {
		t.Errorf("the open session was not finalized with sidecar-shutdown:\n%s", logs.String())
	}
}
