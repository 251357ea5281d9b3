package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/launch"
)

// TestOpenSSHShowsRefusals checks that stock OpenSSH shows the reason of a
// refused session every time, not only when it happens to read stderr
// before it acts on a failed exec reply: a used session id, a reserved run
// id, an invalid run id and a launch failure, 20 times each.
func TestOpenSSHShowsRefusals(t *testing.T) {
	t.Parallel() // see parallel_test.go
	h := newHarness(t)
	failing := newHarness(t, withLauncher(func(l launch.Launcher) launch.Launcher { return failingLauncher{l} }))
	if code := exitCode(t, h.openssh(t, "-o", "SetEnv=APTL_SESSION_ID=used-1", "true").Run()); code != 0 {
		t.Fatalf("first session with the id: exit %d", code)
	}
	h.waitIdle(t)
	cases := []struct {
		name, want string
		h          *harness
		env        []string
	}{
		{"used id", "session id used-1 was already recorded", h, []string{"APTL_SESSION_ID=used-1"}},
		{"reserved run id", `APTL_RUN_ID "_audit" is a reserved name`, h, []string{"APTL_RUN_ID=_audit"}},
		{"invalid run id", "APTL_RUN_ID: value is not a valid id", h, []string{"APTL_RUN_ID=../x"}},
		{"launch failure", "could not start the session process", failing, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 20 {
				env := tc.env
				if tc.name == "launch failure" {
					env = []string{fmt.Sprintf("APTL_SESSION_ID=nolaunch-%d", i)}
				}
				args := []string{"-o", "SetEnv=" + strings.Join(env, " "), "echo SHOULD_NOT_RUN"}
				cmd := tc.h.openssh(t, args...)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				code := exitCode(t, cmd.Run())
				if code != 1 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "aptl-kali-capture: "+tc.want) {
					t.Fatalf("attempt %d: exit %d, stdout %q, stderr %q; want exit 1 and %q", i+1, code, stdout.String(), stderr.String(), tc.want)
				}
			}
		})
	}
	// A used id's folder is never reopened: the refusals are in the log.
	h.waitIdle(t)
	if got := strings.Count(h.logs.String(), "session refused"); got < 60 {
		t.Errorf("%d refusals logged, want 60", got)
	}
	// A launch failure has a record, and it says refused and why, with the
	// line the client got.
	failing.waitIdle(t)
	dir := failing.sessionDir("openssh", "nolaunch-0")
	hdr := timingHeaders(t, dir)
	if hdr["APTL_CLOSE_REASON"] != "launch-failed" || hdr["APTL_NOTICE"] != "could not start the session process" || hdr["EXIT_CODE"] != "1" {
		t.Errorf("launch failure record: %v", hdr)
	}
	if ts, _ := os.ReadFile(filepath.Join(dir, "pty", "typescript")); !bytes.Contains(ts, []byte("aptl-kali-capture: could not start the session process\n")) {
		t.Error("the refusal line the client got is not in the typescript")
	}
}
