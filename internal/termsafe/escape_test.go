package termsafe_test

import (
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/termsafe"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain run-1/sess_2.x":   "plain run-1/sess_2.x",
		"naïve ünïcode":          "naïve ünïcode",
		"a\x1b[2K\rOK\a":         `a\x1b[2K\rOK\a`,
		"csi \u009b31m del \x7f": `csi \u009b31m del \x7f`,
		"raw \x9b byte":          `raw \x9b byte`,
		"bidi \u202egnp.exe":     `bidi \u202egnp.exe`,
		"line\nbreak\ttab":       `line\nbreak\ttab`,
	} {
		if got := termsafe.Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}
