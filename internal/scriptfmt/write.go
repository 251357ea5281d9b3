// Package scriptfmt is util-linux script(1)'s on-disk format as this project
// writes it: the typescript's start and done lines, and the timing file in
// script's advanced multi-stream form (H, I, O and S lines), so that
// `scriptreplay -T timing -B typescript` plays the record. It holds the
// writer (this file) and the one parser of those files (parse.go), which
// accepts exactly what the writer produces.
package scriptfmt

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TimeLayout is script(1)'s strtime_iso(ISO_TIMESTAMP) form, used in the
// typescript header, trailer and START_TIME: "2026-11-30 16:18:11+00:00".
const TimeLayout = "2006-01-02 15:04:05-07:00"

const (
	// MaxHeaderName matches scriptreplay's `fscanf(f, "%128s", buf)` for the
	// H/S name (term-utils/script-playutils.c, read_multistream_step); a
	// longer name would spill into the value.
	MaxHeaderName = 128

	// MaxHeaderValue bounds an escaped H value in the timing file, mark
	// included. scriptreplay reads the value with fgets into a BUFSIZ (8192)
	// buffer (read_multistream_step); a longer line would be split and its
	// tail parsed as the next timing entry. The typescript header line has no
	// such limit (ignore_line reads to '\n'), so it keeps the full value.
	MaxHeaderValue = 4096

	// TruncMark ends a value cut at MaxHeaderValue. appendEscaped never
	// emits `\[`, so the mark cannot be mistaken for escaped data.
	TruncMark = `\[truncated]`

	noLimit = math.MaxInt
)

// Header is one provenance line, `H <delay> NAME VALUE` in the timing file.
type Header struct{ Name, Value string }

// ValidHeaderName reports whether name is [A-Z0-9_]{1,128}: one token that
// scriptreplay reads back whole.
func ValidHeaderName(name string) bool {
	if name == "" || len(name) > MaxHeaderName {
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

// Start describes a session in script's start line.
type Start struct {
	Command    string // exec command; "" for a shell
	Term, TTY  string
	Rows, Cols int
}

// HasPTY reports whether s describes a terminal session. Any terminal field
// counts, so a pty-req with an empty TERM still records as a terminal.
func (s Start) HasPTY() bool {
	return s.Term != "" || s.TTY != "" || s.Rows != 0 || s.Cols != 0
}

// StartLine renders the typescript's first line the way script(1) 2.38 does:
// `Script started on <time> [COMMAND="c" TERM="t" TTY="y" COLUMNS="80" LINES="24"]`
// or `[... <not executed on terminal>]`. Values are escaped (including '"',
// unlike script) so the line stays one parseable line.
func StartLine(s Start, wall time.Time) []byte {
	b := append([]byte("Script started on "), wall.AppendFormat(nil, TimeLayout)...)
	b = append(b, " ["...)
	if s.Command != "" {
		b = append(appendAttr(b, "COMMAND", s.Command), ' ')
	}
	if s.HasPTY() {
		if s.Term != "" {
			b = append(appendAttr(b, "TERM", s.Term), ' ')
		}
		if s.TTY != "" {
			b = append(appendAttr(b, "TTY", s.TTY), ' ')
		}
		b = appendAttr(b, vocab.ScriptColumns, strconv.Itoa(s.Cols))
		b = append(b, ' ')
		b = appendAttr(b, vocab.ScriptLines, strconv.Itoa(s.Rows))
	} else {
		b = append(b, "<not executed on terminal>"...)
	}
	return append(b, "]\n"...)
}

// DoneLine renders the typescript's trailer as script's log_close does:
// `\nScript done on <time> [COMMAND_EXIT_CODE="N"]\n`.
func DoneLine(wall time.Time, exitCode int) []byte {
	b := append([]byte("\nScript done on "), wall.AppendFormat(nil, TimeLayout)...)
	b = append(b, ` [COMMAND_EXIT_CODE="`...)
	b = strconv.AppendInt(b, int64(exitCode), 10)
	return append(b, "\"]\n"...)
}

// appendAttr appends NAME="value" with value escaped for a quoted context.
func appendAttr(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, `="`...)
	b = appendEscaped(b, value, true, noLimit)
	return append(b, '"')
}

// AppendHeaders appends one `H 0.000000 NAME VALUE` line per header, as
// script's log_info does (no trailing space when the value is empty).
// Names must already have passed ValidHeaderName.
func AppendHeaders(b []byte, hs []Header) []byte {
	for _, h := range hs {
		b = append(b, "H 0.000000 "...)
		b = append(b, h.Name...)
		if h.Value != "" {
			b = append(b, ' ')
			b = appendEscaped(b, h.Value, false, MaxHeaderValue)
		}
		b = append(b, '\n')
	}
	return b
}

// AppendTiming appends an `I|O <delay> <n>` data entry.
func AppendTiming(b []byte, stream byte, delay time.Duration, n int) []byte {
	b = append(b, stream, ' ')
	b = AppendSeconds(b, delay)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\n')
}

// AppendResize appends the entry script's callback_log_signal writes for
// SIGWINCH: `S <delay> SIGWINCH ROWS=r COLS=c`.
func AppendResize(b []byte, delay time.Duration, rows, cols int) []byte {
	b = append(b, "S "...)
	b = AppendSeconds(b, delay)
	b = append(b, " SIGWINCH ROWS="...)
	b = strconv.AppendInt(b, int64(rows), 10)
	b = append(b, " COLS="...)
	b = strconv.AppendInt(b, int64(cols), 10)
	return append(b, '\n')
}

// AppendSeconds formats d as script's "%ld.%06ld" of a struct timeval.
// Negative durations cannot come from a monotonic clock; they print as zero
// because scriptreplay cannot parse a sign.
func AppendSeconds(b []byte, d time.Duration) []byte {
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
// cut after a whole escape so that, with TruncMark appended, it fits limit.
func appendEscaped(b []byte, s string, quote bool, limit int) []byte {
	start, fits := len(b), len(b)
	// A range loop, which no changed condition can make endless; the size
	// tells an invalid byte (1) from a U+FFFD written out (3).
	for i, r := range s {
		_, size := utf8.DecodeRuneInString(s[i:])
		b = appendEscapedRune(b, r, size, s[i], quote)
		if n := len(b) - start; n > limit {
			return append(b[:fits], TruncMark...)
		} else if n <= limit-len(TruncMark) {
			fits = len(b)
		}
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
