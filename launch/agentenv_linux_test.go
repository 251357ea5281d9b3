package launch

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestAgentRefusesEnvOutsideSet: even the trusted sidecar adapter cannot
// hand a session a loader or shell-startup variable. The refusal names the
// variable, the agent logs the name and never the value, and nothing runs.
func TestAgentRefusesEnvOutsideSet(t *testing.T) {
	const canary = "CANARY-env-value-93b1"
	ta := newTestAgent(t, nil)
	for _, name := range []string{"LD_PRELOAD", "BASH_ENV", "ENV", "PATH", "LD_LIBRARY_PATH", "HOME", "LCX"} {
		t.Run(name, func(t *testing.T) {
			spec, stdin, stdout, _ := pipeSpec(t, "tester", "echo SHOULD_NOT_RUN")
			spec.Env = []string{"LANG=C.UTF-8", name + "=" + canary}
			stdin.Close()
			out := readAllAsync(stdout)
			_, err := ta.agent.Launch(context.Background(), spec)
			if !errors.Is(err, ErrAgentRefused) || !strings.Contains(err.Error(), errCodeEnv) ||
				!strings.Contains(err.Error(), `env \"`+name+`\" is not passed`) {
				t.Fatalf("Launch = %v, want refused with %s naming %s", err, errCodeEnv, name)
			}
			if strings.Contains(err.Error(), canary) {
				t.Errorf("the refusal carries the value: %v", err)
			}
			if got := recvString(t, "stdout", out); got != "" {
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
	spec, stdin, stdout, _ := pipeSpec(t, "tester",
		`printf '%s|' "$APTL_SESSION_ID" "$APTL_RUN_ID" "$APTL_TRACE_ID" "$TERM" "$LANG" "$LC_ALL" "$TZ"`)
	spec.Env = env
	stdin.Close()
	out := readAllAsync(stdout)
	p, err := ta.agent.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if got, want := recvString(t, "stdout", out), "s-1|r-1|t-1|vt100|C.UTF-8|C|UTC|"; got != want {
		t.Errorf("session env %q, want %q", got, want)
	}
	waitExit(t, p)
}

func TestAgentEnvPatternAllowed(t *testing.T) {
	for pattern, want := range map[string]bool{
		"LANG": true, "LC_*": true, "LC_MESSAGES": true, "LC_A*": true, "TZ": true, "TERM": true,
		"APTL_SESSION_ID": true, "L*": false, "LC*": false, "*": false, "LD_PRELOAD": false,
		"LD_*": false, "BASH_ENV": false, "ENV": false, "PATH": false, "TZDIR": false, "LANGUAGE": false,
	} {
		if got := AgentEnvPatternAllowed(pattern); got != want {
			t.Errorf("AgentEnvPatternAllowed(%q) = %v, want %v", pattern, got, want)
		}
	}
}
