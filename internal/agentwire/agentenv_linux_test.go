package agentwire

import (
	"testing"
)

func TestEnvPatternAllowed(t *testing.T) {
	for pattern, want := range map[string]bool{
		"LANG": true, "LC_*": true, "LC_MESSAGES": true, "LC_A*": true, "TZ": true, "TERM": true,
		"APTL_SESSION_ID": true, "L*": false, "LC*": false, "*": false, "LD_PRELOAD": false,
		"LD_*": false, "BASH_ENV": false, "ENV": false, "PATH": false, "TZDIR": false, "LANGUAGE": false,
	} {
		if got := EnvPatternAllowed(pattern); got != want {
			t.Errorf("EnvPatternAllowed(%q) = %v, want %v", pattern, got, want)
		}
	}
}
