package agentd

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch/agentclient"
	"github.com/aptl/aptl-kali-capture/launch/launchtest"
)

// TestAgentRefusesEnvOutsideSet: even the trusted sidecar adapter cannot
// hand a session a loader or shell-startup variable. The refusal names the
// variable, the agent logs the name and never the value, and nothing runs.
func TestAgentRefusesEnvOutsideSet(t *testing.T) {
	const canary = "CANARY-env-value-93b1"
	ta := newTestAgent(t, nil)
	for _, name := range []string{"LD_PRELOAD", "BASH_ENV", "ENV", "PATH", "LD_LIBRARY_PATH", "HOME", "LCX"} {
		t.Run(name, func(t *testing.T) {
			spec, stdin, stdout, _ := launchtest.PipeSpec(t, "tester", "echo SHOULD_NOT_RUN")
			spec.Env = []string{"LANG=C.UTF-8", name + "=" + canary}
			stdin.Close()
			out := testutil.ReadAllAsync(stdout)
			_, err := ta.agent.Launch(context.Background(), spec)
			if !errors.Is(err, agentclient.ErrAgentRefused) || !strings.Contains(err.Error(), agentwire.CodeEnv) ||
				!strings.Contains(err.Error(), `env \"`+name+`\" is not passed`) {
				t.Fatalf("Launch = %v, want refused with %s naming %s", err, agentwire.CodeEnv, name)
			}
			if strings.Contains(err.Error(), canary) {
				t.Errorf("the refusal carries the value: %v", err)
			}
			if got := testutil.RecvString(t, "stdout", out); got != "" {
				t.Errorf("the refused session ran and wrote %q", got)
			}
		})
	}
	logs := ta.logs.String()
	if strings.Contains(logs, canary) {
		t.Errorf("the agent logged an env value: %s", logs)
	}
	for _, name := range []string{"LD_PRELOAD", "BASH_ENV", "PATH"} {
		if !strings.Contains(logs, `\"`+name+`\" is not passed`) {
			t.Errorf("the agent's log does not name the refused %s: %s", name, logs)
		}
	}
	if strings.Contains(logs, `"session started"`) {
		t.Errorf("a session started: %s", logs)
	}
}

// TestAgentPassesEnvSet: every name of the fixed set reaches the session.
func TestAgentPassesEnvSet(t *testing.T) {
	ta := newTestAgent(t, nil)
	env := []string{"APTL_SESSION_ID=s-1", "APTL_RUN_ID=r-1", "APTL_TRACE_ID=t-1", "TERM=vt100", "LANG=C.UTF-8", "LC_ALL=C", "TZ=UTC"}
	spec, stdin, stdout, _ := launchtest.PipeSpec(t, "tester",
		`printf '%s|' "$APTL_SESSION_ID" "$APTL_RUN_ID" "$APTL_TRACE_ID" "$TERM" "$LANG" "$LC_ALL" "$TZ"`)
	spec.Env = env
	stdin.Close()
	out := testutil.ReadAllAsync(stdout)
	p, err := ta.agent.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if got, want := testutil.RecvString(t, "stdout", out), "s-1|r-1|t-1|vt100|C.UTF-8|C|UTC|"; got != want {
		t.Errorf("session env %q, want %q", got, want)
	}
	launchtest.WaitExit(t, p)
}
