package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

// TestServerStartsSessionsThroughTrampolineProgram: built beside the server
// from the same build (as the benchmark builds them), aptl-login-trampoline
// is what each local session's start executes (the server's copy of it,
// so overwriting the file after the start changes nothing), and the
// server's own program is not; beside it but writable by others, or from
// another build, it is refused with the reason in the log, and sessions
// re-execute the server instead. Which program ran is read from the
// kernel: an inotify watch on both files counts the opens that an exec of
// either makes, and the session's audit-session record says whether a
// trampoline ran.
func TestServerStartsSessionsThroughTrampolineProgram(t *testing.T) {
	t.Parallel() // see parallel_test.go
	skipUnlessLive(t)
	captureBin := built(t, captureBuild)
	sameTrampoline, otherTrampoline := built(t, trampolineBuild), built(t, trampolineOther)

	cases := []struct {
		name       string
		trampoline string // the program placed beside the server
		mode       os.FileMode
		wantLog    string
		viaProgram bool
	}{
		{"same build", sameTrampoline, 0o755, `msg="login trampoline" program=`, true},
		{"writable by others", sameTrampoline, 0o775, "writable by group or others", false},
		{"another build", otherTrampoline, 0o755, "build setting -ldflags", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			server := filepath.Join(dir, "aptl-kali-capture")
			trampoline := filepath.Join(dir, login.TrampolineProgram)
			copyFile(t, captureBin, server, 0o755)
			copyFile(t, c.trampoline, trampoline, c.mode)

			work := t.TempDir()
			_, sshArgs, logs := startServe(t, server, work)
			// The log comes through stderr, a pipe of its own: it may
			// reach the buffer after the ssh line on stdout did.
			waitFor(t, 10*time.Second, "the server's log to say "+c.wantLog, func() bool { return strings.Contains(logs.String(), c.wantLog) })
			if c.viaProgram {
				// Overwritten in place: what runs was copied at the start.
				if err := os.WriteFile(trampoline, []byte("#!/bin/sh\nexit 0\n"), 0); err != nil {
					t.Fatal(err)
				}
			}
			opens := testutil.WatchOpens(t, server, trampoline)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append(sshArgs, "-o", "BatchMode=yes", "-o", "SetEnv=APTL_SESSION_ID=tramp-1", "echo TRAMPOLINED_$((40+2))")
			if out, err := exec.CommandContext(ctx, "ssh", args...).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "TRAMPOLINED_42" {
				t.Fatalf("session failed: %v\n%s\nserver logs:\n%s", err, out, logs.String())
			}
			got := opens()
			wantServer := 1
			if c.viaProgram {
				wantServer = 0
			}
			if got[server] != wantServer || got[trampoline] != 0 {
				t.Errorf("opens during the session: %s %d, %s %d; want the server %d and the file beside it 0",
					filepath.Base(server), got[server], login.TrampolineProgram, got[trampoline], wantServer)
			}
			// Through either program the session got its audit session: a
			// trampoline ran (a session started without one says why).
			a := auditSessionOf(t, filepath.Join(work, "aptl-dev", "captures", "_unbound", "tramp-1"))
			if loginUIDUnset() && a[vocab.AttrAuditSes] == "" {
				t.Errorf("the session has no audit session of its own: %v", a)
			}
			if strings.Contains(a[vocab.AttrAuditSesReason], "could not be started") {
				t.Errorf("no trampoline ran: %v", a)
			}
		})
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, mode); err != nil {
		t.Fatal(err)
	}
}
