package agentwire

import (
	"fmt"
	"strings"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// The agent passes a session only the environment names in this fixed set,
// whoever asks: the ids the broker validates (broker/policy.go; their names are the
// provenance headers' of internal/vocab), TERM, and
// the locale and time zone names of the broker's default accept list. A
// name outside it (LD_PRELOAD, BASH_ENV, ENV, PATH, ...) would let whoever
// speaks for the sidecar choose what a root shell loads or runs before its
// first prompt, so it is refused even from a trusted peer. The set is code,
// not configuration: the wire carries no settings (wire_linux.go).
var agentEnvNames = []string{vocab.HeaderSessionID, vocab.HeaderRunID, vocab.HeaderTraceID, "TERM", "LANG", "TZ"}

// agentEnvPrefix is the one prefix in the set: the locale categories.
const agentEnvPrefix = "LC_"

// EnvAllowed reports whether the launch agent passes env name to a session.
func EnvAllowed(name string) bool {
	for _, n := range agentEnvNames {
		if name == n {
			return true
		}
	}
	return strings.HasPrefix(name, agentEnvPrefix)
}

// EnvPatternAllowed reports whether every name an accept-list pattern
// of the sidecar matches (a name, or a prefix ending in '*') is one the
// agent passes, so a sidecar can refuse at start a list the agent would
// refuse per session.
func EnvPatternAllowed(pattern string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(prefix, agentEnvPrefix)
	}
	return EnvAllowed(pattern)
}

// EnvSet names the set for error messages.
func EnvSet() string {
	return strings.Join(agentEnvNames, ", ") + ", " + agentEnvPrefix + "*"
}

// CheckEnv refuses the first entry whose name is outside the set. The
// error names the variable, never its value (values may hold secrets).
func CheckEnv(env []string) error {
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !EnvAllowed(name) {
			return fmt.Errorf("env %q is not passed by the launch agent, which accepts only %s "+
				"(loader and shell-startup variables are refused from any peer)", Truncate(name, 64), EnvSet())
		}
	}
	return nil
}
