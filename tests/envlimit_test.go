package tests

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestLateIDRefusesSession sends an id after the env request limit (64 by
// default): it cannot be applied, so the session is refused with a reason,
// as for an invalid run id, instead of being recorded as _unbound/anon-*.
func TestLateIDRefusesSession(t *testing.T) {
	h := newHarness(t)
	c := h.dial(t)
	for _, name := range []string{"APTL_SESSION_ID", "APTL_RUN_ID"} {
		t.Run(name, func(t *testing.T) {
			var env []envVar
			for i := range 64 {
				env = append(env, envVar{fmt.Sprintf("LC_FILL%d", i), "x"})
			}
			env = append(env, envVar{name, "late-1"})
			res := rawExecEnv(t, c, env, "echo SHOULD_NOT_RUN")
			h.waitIdle(t)
			if !res.refused() || res.stdout != "" {
				t.Fatalf("session ran without its id: %+v", res)
			}
			if want := name + " was sent after the limit of 64 env requests"; !strings.Contains(res.stderr, want) {
				t.Errorf("stderr = %q, want %q", res.stderr, want)
			}
			if dirs, _ := filepath.Glob(filepath.Join(h.root, "*", "*")); len(dirs) != 0 {
				t.Errorf("the session was recorded anyway: %v", dirs)
			}
		})
	}
}
