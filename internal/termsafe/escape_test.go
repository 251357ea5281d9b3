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
		// Strings made only of bytes from 0x7f up: DEL alone, and U+009B,
		// the one-character C1 CSI, alone (its UTF-8 bytes are 0xc2 0x9b).
		"\x7f":   `\x7f`,
		"\u009b": `\u009b`,
	} {
		if got := termsafe.Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}
