package scriptfmt

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	// MaxLine bounds a timing line, newline included. The writer's longest
	// is an H line: MaxHeaderName and MaxHeaderValue plus the prefix.
	MaxLine = 64 << 10
	// MaxStartLine bounds the typescript's start line; its escaped values
	// (an exec command of up to 64 KiB) are not cut as H values are.
	MaxStartLine = 1 << 20
	// MaxDelaySeconds bounds one delay (about 31 years), so a running total
	// of delays cannot overflow a time.Duration.
	MaxDelaySeconds = 1e9
	// MaxEntryBytes bounds the byte count of one I or O entry (1 TiB, far
	// above any single write), so totals cannot overflow.
	MaxEntryBytes = 1 << 40
	// maxWinsize is the largest window dimension a struct winsize holds.
	maxWinsize = 1<<16 - 1
)

// Entry is one parsed timing line.
type Entry struct {
	Kind        byte          // 'H', 'I', 'O' or 'S'
	Delay       time.Duration // since the previous entry, in microseconds
	N           int64         // I, O: bytes of the typescript
	Name, Value string        // H: the header, Value still escaped; S: "SIGWINCH"
	Rows, Cols  int           // S SIGWINCH
}

// ErrTimingLine is wrapped by every refusal of ParseLine and Scan.
var ErrTimingLine = errors.New("not a timing line as aptl-kali-capture writes it")

// ParseLine parses one timing line without its newline. It accepts exactly
// the forms the writer produces, which scriptreplay reads as written:
//
//	H <delay> NAME[ VALUE]
//	I|O <delay> <n>
//	S <delay> SIGWINCH ROWS=<r> COLS=<c>
//
// with single spaces between fields, <delay> as "%d.%06d" and numbers in
// plain decimal. Anything else (signs, exponents, NaN, hex, tabs, extra
// fields, control characters) is refused, saying which part is wrong.
func ParseLine(line string) (Entry, error) {
	bad := func(what string) (Entry, error) {
		return Entry{}, fmt.Errorf("%w (%s): %.60q", ErrTimingLine, what, line)
	}
	if len(line) < 2 || line[1] != ' ' || !strings.ContainsRune("HIOS", rune(line[0])) {
		return bad("kind: want H, I, O or S and a space")
	}
	e := Entry{Kind: line[0]}
	d, rest, _ := strings.Cut(line[2:], " ")
	var ok bool
	if e.Delay, ok = parseDelay(d); !ok {
		return bad("delay: want seconds as 0.000000")
	}
	switch e.Kind {
	case 'H':
		if what := parseHeader(rest, &e); what != "" {
			return bad(what)
		}
	case 'I', 'O':
		if e.N, ok = parseDecimal(rest, MaxEntryBytes); !ok {
			return bad("byte count")
		}
	case 'S':
		if !parseWinch(rest, &e) {
			return bad("window size: want SIGWINCH ROWS=<rows> COLS=<cols>")
		}
	}
	return e, nil
}

// parseDelay reads "<seconds>.<6 digits>" as the writer's AppendSeconds
// formats it.
func parseDelay(s string) (time.Duration, bool) {
	sec, frac, ok := strings.Cut(s, ".")
	if !ok || len(frac) != 6 {
		return 0, false
	}
	n, ok := parseDecimal(sec, MaxDelaySeconds)
	if !ok {
		return 0, false
	}
	us, ok := parseDigits(frac)
	if !ok {
		return 0, false
	}
	return time.Duration(n*1e6+us) * time.Microsecond, true
}

// parseDecimal reads a number as strconv.AppendInt writes it: digits only,
// no sign and no leading zero, at most limit.
func parseDecimal(s string, limit int64) (int64, bool) {
	if len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	n, ok := parseDigits(s)
	return n, ok && n <= limit
}

// parseDigits reads 1 to 18 ASCII digits.
func parseDigits(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

// parseHeader reads `NAME[ VALUE]`; it returns what is wrong, or "".
func parseHeader(s string, e *Entry) string {
	name, value, hasValue := strings.Cut(s, " ")
	if !ValidHeaderName(name) {
		return "header name: want [A-Z0-9_]{1,128}"
	}
	if hasValue && value == "" {
		return "header value: a space and no value"
	}
	if len(value) > MaxHeaderValue {
		return fmt.Sprintf("header value longer than %d bytes", MaxHeaderValue)
	}
	// A range loop has no condition to turn around: it ends with the
	// value, which is bounded above.
	const unescaped = "header value: an unescaped non-printable character or invalid UTF-8"
	if !utf8.ValidString(value) {
		return unescaped
	}
	for _, r := range value {
		if !strconv.IsPrint(r) {
			return unescaped
		}
	}
	e.Name, e.Value = name, value
	return ""
}

// parseWinch reads `SIGWINCH ROWS=<r> COLS=<c>`.
func parseWinch(s string, e *Entry) bool {
	rest, ok := strings.CutPrefix(s, "SIGWINCH ROWS=")
	if !ok {
		return false
	}
	rows, cols, ok := strings.Cut(rest, " COLS=")
	if !ok {
		return false
	}
	r, okR := parseDecimal(rows, maxWinsize)
	c, okC := parseDecimal(cols, maxWinsize)
	e.Name, e.Rows, e.Cols = "SIGWINCH", int(r), int(c)
	return okR && okC
}

// LineError locates a refused timing line: the file and its 1-based line.
type LineError struct {
	Path string
	Line int
	Off  int64 // byte offset of the line in the file
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.Path, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Scan calls fn for each line of the timing file r, which it names path in
// errors. Every line must parse and end with a newline (the writer ends
// each one); an empty line or a longer one than MaxLine is refused. An
// error from fn stops the scan and is returned located the same way.
func Scan(r io.Reader, path string, fn func(Entry) error) error {
	br := bufio.NewReaderSize(r, MaxLine)
	var off int64
	for n := 1; ; n++ {
		raw, err := br.ReadSlice('\n')
		lineErr := func(err error) error { return &LineError{Path: path, Line: n, Off: off, Err: err} }
		switch {
		case err == io.EOF && len(raw) == 0:
			return nil
		case err == io.EOF:
			return lineErr(fmt.Errorf("%w: the last line has no newline: %.60q", ErrTimingLine, raw))
		case err == bufio.ErrBufferFull:
			return lineErr(fmt.Errorf("%w: line longer than %d bytes", ErrTimingLine, MaxLine))
		case err != nil:
			return lineErr(err)
		}
		e, err := ParseLine(string(raw[:len(raw)-1]))
		if err == nil {
			err = fn(e)
		}
		if err != nil {
			return lineErr(err)
		}
		off += int64(len(raw))
	}
}

// UnescapeHeaderValue undoes the writer's escaping, whose escapes are Go's.
// A value it did not write (or a truncated one) is returned as it is.
func UnescapeHeaderValue(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	s, err := strconv.Unquote(`"` + strings.ReplaceAll(v, `"`, `\"`) + `"`)
	if err != nil {
		return v
	}
	return s
}

// ReadStartLine consumes the typescript's start line from r, newline
// included, and returns its length; a typescript with no newline within
// MaxStartLine bytes, or none at all, is refused.
func ReadStartLine(r *bufio.Reader) (int64, error) {
	var n int64
	for {
		chunk, err := r.ReadSlice('\n')
		n += int64(len(chunk))
		if err == nil {
			return n, nil
		}
		if n > MaxStartLine {
			return n, fmt.Errorf("no start line within %d bytes", MaxStartLine)
		}
		if err != bufio.ErrBufferFull {
			return n, fmt.Errorf("no start line: %w", err)
		}
	}
}
