package scriptfmt

import (
	"strings"
	"testing"
)

// TestHeaderNameAlphabetAndLength holds ValidHeaderName to [A-Z0-9_]{1,128}
// at every edge: the first and last letter and digit are names, the bytes
// just outside each range are not, and 128 bytes is the longest name
// scriptreplay reads whole (its %128s).
func TestHeaderNameAlphabetAndLength(t *testing.T) {
	for _, name := range []string{"A", "Z", "0", "9", "_", strings.Repeat("A", MaxHeaderName)} {
		if !ValidHeaderName(name) {
			t.Errorf("ValidHeaderName(%.20q, %d bytes) = false, want true", name, len(name))
		}
	}
	for _, name := range []string{"", "@", "[", "/", ":", "a", "^", "A B", strings.Repeat("A", MaxHeaderName+1)} {
		if ValidHeaderName(name) {
			t.Errorf("ValidHeaderName(%.20q, %d bytes) = true, want false", name, len(name))
		}
	}
}

// TestHeaderValueCutAtItsBound: a header value that escapes to exactly
// MaxHeaderValue bytes is written whole; one byte more is cut after a
// whole escape and marked, and the marked line still fits the bound, so
// the reader, which refuses longer values, reads it back.
func TestHeaderValueCutAtItsBound(t *testing.T) {
	value := func(b []byte) string {
		line := strings.TrimSuffix(string(b), "\n")
		return strings.TrimPrefix(line, "H 0.000000 NAME ")
	}
	exact := strings.Repeat("v", MaxHeaderValue)
	if got := value(AppendHeaders(nil, []Header{{"NAME", exact}})); got != exact {
		t.Errorf("a %d-byte value came out as %d bytes, ending %q; want it whole", len(exact), len(got), got[len(got)-20:])
	}
	over := exact + "v"
	got := value(AppendHeaders(nil, []Header{{"NAME", over}}))
	if !strings.HasSuffix(got, TruncMark) || len(got) != MaxHeaderValue {
		t.Errorf("a %d-byte value came out as %d bytes ending %q; want exactly %d (the most that fits) ending %q", len(over), len(got), got[max(0, len(got)-20):], MaxHeaderValue, TruncMark)
	}
	// Escapes are cut whole: a value of \x1b bytes (4 escaped bytes each)
	// leaves no partial escape before the mark.
	esc := value(AppendHeaders(nil, []Header{{"NAME", strings.Repeat("\x1b", MaxHeaderValue)}}))
	body := strings.TrimSuffix(esc, TruncMark)
	if len(body)%4 != 0 || strings.ReplaceAll(body, `\x1b`, "") != "" || len(esc) > MaxHeaderValue {
		t.Errorf("escaped value cut to %d bytes before the mark (%d in all): want whole 4-byte escapes within %d", len(body), len(esc), MaxHeaderValue)
	}
	for _, v := range []string{exact, over} {
		line := strings.TrimSuffix(string(AppendHeaders(nil, []Header{{"NAME", v}})), "\n")
		if _, err := ParseLine(line); err != nil {
			t.Errorf("the reader refuses the written header of a %d-byte value: %v", len(v), err)
		}
	}
}

// TestDigitsBound: 18 digits are the most a number in a timing line may
// have (they fit an int64 whatever they are), 19 are refused before any
// overflow.
func TestDigitsBound(t *testing.T) {
	if n, ok := parseDigits("999999999999999999"); !ok || n != 999999999999999999 {
		t.Errorf("parseDigits(18 nines) = %d, %v; want the number", n, ok)
	}
	if _, ok := parseDigits("1000000000000000000"); ok {
		t.Error("parseDigits(19 digits) accepted")
	}
}

// TestShortestLinesNameTheirFault: "O " has a kind and a space, so its
// refusal is about what follows, not the kind; a one-byte line's is the
// kind.
func TestShortestLinesNameTheirFault(t *testing.T) {
	if _, err := ParseLine("O "); err == nil || strings.Contains(err.Error(), "(kind") {
		t.Errorf(`ParseLine("O ") = %v; want a refusal that is not about the kind`, err)
	}
	if _, err := ParseLine("O"); err == nil || !strings.Contains(err.Error(), "(kind") {
		t.Errorf(`ParseLine("O") = %v; want the kind refused`, err)
	}
}
