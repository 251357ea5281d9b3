// Package termsafe keeps strings from records, file names and clients from
// acting on the terminal of whoever reads them.
package termsafe

import (
	"io"
	"unicode/utf8"
)

// Go's JSON encoders (encoding/json, log/slog) escape only C0 controls,
// quotes, backslashes and U+2028/U+2029; DEL, the C1 controls (U+0080 to
// U+009F: U+009B is a one-rune CSI on many terminals) and the bidi
// controls (which reorder what a terminal shows) pass through raw, so
// `tail -f` of a JSON log can be steered by a hostile path.

// unsafeRune reports the runes JSON output carries escaped here.
func unsafeRune(r rune) bool {
	switch {
	case r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // ALM, LRM, RLM
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069: // embeddings, overrides, isolates
		return true
	}
	return false
}

// AppendJSONSafe appends src to dst with every unsafe rune written as a
// \uXXXX escape. src must be JSON whose only non-ASCII bytes are inside
// strings, as every encoder's output is: there the escape stands for the
// same rune, so the result is valid JSON that decodes to the same values.
func AppendJSONSafe(dst, src []byte) []byte {
	const hex = "0123456789abcdef"
	for len(src) > 0 {
		r, size := utf8.DecodeRune(src)
		if unsafeRune(r) {
			dst = append(dst, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
		} else {
			dst = append(dst, src[:size]...)
		}
		src = src[size:]
	}
	return dst
}

// JSONWriter rewrites the unsafe runes of the JSON written through it.
// Each Write must hold whole runes, as slog's handlers ensure by writing
// each record with a single Write.
type JSONWriter struct {
	w io.Writer
}

// NewJSONWriter wraps w.
func NewJSONWriter(w io.Writer) *JSONWriter { return &JSONWriter{w: w} }

// Write writes p, escaped; it reports len(p) when all of it was written.
func (j *JSONWriter) Write(p []byte) (int, error) {
	if !hasNonASCII(p) {
		return j.w.Write(p)
	}
	if _, err := j.w.Write(AppendJSONSafe(make([]byte, 0, len(p)+32), p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func hasNonASCII(p []byte) bool {
	for _, b := range p {
		if b >= 0x7f {
			return true
		}
	}
	return false
}
