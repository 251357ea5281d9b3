package recorder

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// timeLayout is script(1)'s strtime_iso(ISO_TIMESTAMP) form, used in the
// typescript header, trailer and START_TIME: "2026-11-30 16:18:11+00:00".
const timeLayout = "2006-01-02 15:04:05-07:00"

const (
	// maxHeaderName matches scriptreplay's `fscanf(f, "%128s", buf)` for the
	// H/S name (term-utils/script-playutils.c, read_multistream_step); a
	// longer name would spill into the value.
	maxHeaderName = 128

	// maxHeaderValue bounds an escaped H value in the timing file, mark
	// included. scriptreplay reads the value with fgets into a BUFSIZ (8192)
	// buffer (read_multistream_step); a longer line would be split and its
	// tail parsed as the next timing entry. The typescript header line has no
	// such limit (ignore_line reads to '\n'), so it keeps the full value.
	maxHeaderValue = 4096

	// truncMark ends a value cut at maxHeaderValue. appendEscaped never emits
	// `\[`, so the mark cannot be mistaken for escaped data.
	truncMark = `\[truncated]`

	noLimit = math.MaxInt
)

// validHeaderName reports whether name is [A-Z0-9_]{1,128}: one token that
// scriptreplay reads back whole.
func validHeaderName(name string) bool {
	if name == "" || len(name) > maxHeaderName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// hasPTY reports whether m describes a terminal session. Any terminal field
// counts, so a pty-req with an empty TERM still records as a terminal.
func hasPTY(m Meta) bool {
	return m.Term != "" || m.TTY != "" || m.Rows != 0 || m.Cols != 0
}

// startLine renders the typescript's first line the way script(1) 2.38 does:
// `Script started on <time> [COMMAND="c" TERM="t" TTY="y" COLUMNS="80" LINES="24"]`
// or `[... <not executed on terminal>]`. Values are escaped (including '"',
// unlike script) so the line stays one parseable line.
func startLine(m Meta, wall time.Time) []byte {
	b := append([]byte("Script started on "), wall.AppendFormat(nil, timeLayout)...)
	b = append(b, " ["...)
	if m.Command != "" {
		b = append(appendAttr(b, "COMMAND", m.Command), ' ')
	}
	if hasPTY(m) {
		if m.Term != "" {
			b = append(appendAttr(b, "TERM", m.Term), ' ')
		}
		if m.TTY != "" {
			b = append(appendAttr(b, "TTY", m.TTY), ' ')
		}
		b = appendAttr(b, "COLUMNS", strconv.Itoa(m.Cols))
		b = append(b, ' ')
		b = appendAttr(b, "LINES", strconv.Itoa(m.Rows))
	} else {
		b = append(b, "<not executed on terminal>"...)
	}
	return append(b, "]\n"...)
}

// appendAttr appends NAME="value" with value escaped for a quoted context.
func appendAttr(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, `="`...)
	b = appendEscaped(b, value, true, noLimit)
	return append(b, '"')
}

// startHeaders lists the H entries script(1) writes at start, in its order
// (term-utils/script.c, main), followed by the caller's extra headers. The
// log names are relative so a session directory can be moved as a unit.
func startHeaders(m Meta, wall time.Time) []Header {
	hs := []Header{{"START_TIME", wall.Format(timeLayout)}}
	if hasPTY(m) {
		hs = appendNonEmpty(hs, "TERM", m.Term)
		hs = appendNonEmpty(hs, "TTY", m.TTY)
		hs = append(hs, Header{"COLUMNS", strconv.Itoa(m.Cols)}, Header{"LINES", strconv.Itoa(m.Rows)})
	}
	hs = appendNonEmpty(hs, "SHELL", m.Shell)
	hs = appendNonEmpty(hs, "COMMAND", m.Command)
	hs = append(hs,
		Header{"TIMING_LOG", timingName},
		Header{"OUTPUT_LOG", typescriptName},
		Header{"INPUT_LOG", typescriptName})
	return append(hs, m.Headers...)
}

func appendNonEmpty(hs []Header, name, value string) []Header {
	if value == "" {
		return hs
	}
	return append(hs, Header{name, value})
}

// appendHeaders appends one `H 0.000000 NAME VALUE` line per header, as
// script's log_info does (no trailing space when the value is empty).
// Names must already have passed validHeaderName.
func appendHeaders(b []byte, hs []Header) []byte {
	for _, h := range hs {
		b = append(b, "H 0.000000 "...)
		b = append(b, h.Name...)
		if h.Value != "" {
			b = append(b, ' ')
			b = appendEscaped(b, h.Value, false, maxHeaderValue)
		}
		b = append(b, '\n')
	}
	return b
}

// appendTiming appends an `I|O <delay> <n>` data entry.
func appendTiming(b []byte, stream byte, delay time.Duration, n int) []byte {
	b = append(b, stream, ' ')
	b = appendSeconds(b, delay)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\n')
}

// appendResize appends the entry script's callback_log_signal writes for
// SIGWINCH: `S <delay> SIGWINCH ROWS=r COLS=c`.
func appendResize(b []byte, delay time.Duration, rows, cols int) []byte {
	b = append(b, "S "...)
	b = appendSeconds(b, delay)
	b = append(b, " SIGWINCH ROWS="...)
	b = strconv.AppendInt(b, int64(rows), 10)
	b = append(b, " COLS="...)
	b = strconv.AppendInt(b, int64(cols), 10)
	return append(b, '\n')
}

// appendSeconds formats d as script's "%ld.%06ld" of a struct timeval.
// Negative durations cannot come from a monotonic clock; they print as zero
// because scriptreplay cannot parse a sign.
func appendSeconds(b []byte, d time.Duration) []byte {
	us := max(int64(d/time.Microsecond), 0)
	b = strconv.AppendInt(b, us/1e6, 10)
	b = append(b, '.')
	frac := us % 1e6
	for div := int64(1e5); div > 0; div /= 10 {
		b = append(b, byte('0'+frac/div%10))
	}
	return b
}

// appendEscaped appends s with everything that could end, forge or hide a
// line escaped Go-style: control characters (\n, \r, \x1b, \x7f ...),
// non-printable runes (\u0085, \u202e), invalid UTF-8 (\xff) and the
// backslash itself, so the escaping is unambiguous. Printable UTF-8 is kept.
// In a quoted context '"' is escaped too. Output longer than limit bytes is
// cut after a whole escape so that, with truncMark appended, it fits limit.
func appendEscaped(b []byte, s string, quote bool, limit int) []byte {
	start, fits := len(b), len(b)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		b = appendEscapedRune(b, r, size, s[i], quote)
		if n := len(b) - start; n > limit {
			return append(b[:fits], truncMark...)
		} else if n <= limit-len(truncMark) {
			fits = len(b)
		}
		i += size
	}
	return b
}

// appendEscapedRune escapes one decoded rune; first is the rune's first byte,
// needed when it is not valid UTF-8.
func appendEscapedRune(b []byte, r rune, size int, first byte, quote bool) []byte {
	const hex = "0123456789abcdef"
	switch {
	case r == utf8.RuneError && size == 1:
		return append(b, '\\', 'x', hex[first>>4], hex[first&0xf])
	case r == '\\':
		return append(b, `\\`...)
	case r == '"' && quote:
		return append(b, `\"`...)
	case strconv.IsPrint(r):
		return utf8.AppendRune(b, r)
	}
	q := strconv.QuoteRune(r) // e.g. '\n', '\x1b', '\u202e'
	return append(b, q[1:len(q)-1]...)
}
