// Package termsafe keeps hostile strings (file names, record fields) from
// reaching a terminal as control sequences, in text and in JSON. Text goes
// through Escape (escape.go), which writes every character that is not
// printable as a Go escape. encoding/json escapes only the C0 controls
// (below U+0020) and U+2028/U+2029; DEL, the C1 controls (U+0080–U+009F:
// U+009B is a CSI that many terminals obey) and the bidi controls pass
// through raw. NewJSONWriter escapes them. It has no dependency beyond the
// standard library, so any writer of the module (the examiner's reports
// and exports, the key reader's errors, a slog JSON handler) can use it.
package termsafe

import (
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// NewJSONWriter returns a writer that passes JSON text to w with every
// character strconv.IsPrint rejects at or above U+007F (DEL, the C1
// controls, bidi and other format characters, as the text output's
// escaping does) written as a \u escape. Outside strings JSON text is
// ASCII, so only string contents change, and they decode to the same
// value. json.Encoder and slog.JSONHandler write whole values per Write;
// a UTF-8 sequence split across two writes is held until it is complete.
func NewJSONWriter(w io.Writer) io.Writer { return &jsonWriter{w: w} }

type jsonWriter struct {
	w       io.Writer
	partial []byte // an incomplete UTF-8 sequence ending the last write
	buf     []byte
}

func (j *jsonWriter) Write(p []byte) (int, error) {
	in := p
	if len(j.partial) > 0 {
		in = append(j.partial, p...)
		j.partial = nil
	}
	out := j.buf[:0]
	for i := 0; i < len(in); {
		c := in[i]
		if c < utf8.RuneSelf && c != 0x7f {
			out = append(out, c)
			i++
			continue
		}
		if !utf8.FullRune(in[i:]) {
			j.partial = append([]byte(nil), in[i:]...)
			break
		}
		r, size := utf8.DecodeRune(in[i:])
		if r == utf8.RuneError && size == 1 || strconv.IsPrint(r) {
			out = append(out, in[i:i+size]...)
		} else {
			out = appendEscape(out, r)
		}
		i += size
	}
	j.buf = out
	if _, err := j.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// appendEscape appends r as JSON's \uXXXX, a surrogate pair above U+FFFF.
func appendEscape(b []byte, r rune) []byte {
	if r > 0xffff {
		hi, lo := utf16.EncodeRune(r)
		return appendEscape(appendEscape(b, hi), lo)
	}
	const hex = "0123456789abcdef"
	return append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
}
