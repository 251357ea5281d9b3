package termsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Escape makes s safe to print on a terminal, as ls and git do with file
// names: every character that is not printable (C0 and C1 controls, DEL,
// bidi and other format characters, per strconv.IsPrint) becomes a Go
// escape (\x1b, \r, \u009b, \u202e), and every byte that is not UTF-8
// becomes \xNN. Record fields and file names are hostile: without this, a
// forged record could erase verify's FAIL line and print a fake OK. Every
// text output of verify, export and recovery goes through it; JSON output
// goes through NewJSONWriter instead.
func Escape(s string) string {
	if isPlain(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	// A range loop, which no changed condition can make endless; the size
	// tells an invalid byte (1) from a U+FFFD written out (3).
	for i, r := range s {
		_, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r) // '\x1b', '\u009b'
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}

// isPlain reports whether s is printable ASCII, which needs no escaping.
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
