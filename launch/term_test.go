package launch

import (
	"strings"
	"testing"
)

func TestValidTerm(t *testing.T) {
	for term, want := range map[string]bool{
		"xterm-256color": true, "vt100": true, "rxvt-unicode+x": true, "": false,
		"xterm\n": false, "a b": false, strings.Repeat("x", maxTermLen+1): false,
	} {
		if got := ValidTerm(term); got != want {
			t.Errorf("ValidTerm(%q) = %v, want %v", term, got, want)
		}
	}
}
