package recorder

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aptl/aptl-kali-capture/integrity"
)

const (
	// castDefaultWidth and castDefaultHeight size a session without a PTY.
	castDefaultWidth, castDefaultHeight = 80, 24
	// castChunk bounds the bytes of one event: a longer timing entry
	// becomes several events at the same time.
	castChunk = 64 << 10
	// maxTimingLine bounds a timing line. The recorder writes H values of
	// at most maxHeaderValue bytes; scriptreplay reads lines into BUFSIZ.
	maxTimingLine = 64 << 10
	// maxScriptHeaderLine bounds script's header line, as the verifier
	// bounds the length the open record may claim for it.
	maxScriptHeaderLine = 1 << 20
	// maxCastDelay bounds one delay, in seconds (about 31 years), so the
	// running total in microseconds cannot overflow.
	maxCastDelay = 1e9
)

// ExportAsciicast writes the session in dir as an asciicast v2 recording
// (https://docs.asciinema.org/manual/asciicast/v2/) that `asciinema cat` and
// `asciinema play` accept: a header line with the terminal size, start
// time, TERM and a "<run>/<session>" title, then one event per timing
// entry: [t, "o", text] for output (stderr included), [t, "i", text] for
// input and [t, "r", "COLSxROWS"] for a window change, t in seconds since
// the start.
//
// asciicast is a display format: its strings must be valid UTF-8, so each
// stream is decoded incrementally (a character split across two entries is
// kept whole, emitted with the stream's next event) and every byte that is
// not valid UTF-8 becomes U+FFFD. The typescript stays the evidence; the
// export is not, and cannot be verified against the integrity log.
//
// The timing file is read whole and checked before anything is written;
// an error names the file and line. A typescript shorter than its timing
// is reported after the events before it were written.
func ExportAsciicast(dir string, w io.Writer) error {
	tmPath := filepath.Join(dir, ptyDirName, timingName)
	tsPath := filepath.Join(dir, ptyDirName, typescriptName)
	// Both files are opened as the verifier opens them: regular files
	// only, no link followed, read no further than their size at open.
	tmFile, tmSize, err := integrity.OpenRegular(dir, ptyDirName+"/"+timingName)
	if err != nil {
		return fmt.Errorf("recorder: export asciicast: %w", err)
	}
	defer tmFile.Close()
	tm := io.NewSectionReader(tmFile, 0, tmSize)
	hdr, body, err := scanCastHeader(tm, tmPath)
	if err != nil {
		return err
	}
	ts, tsSize, err := integrity.OpenRegular(dir, ptyDirName+"/"+typescriptName)
	if err != nil {
		return fmt.Errorf("recorder: export asciicast: %w", err)
	}
	defer ts.Close()
	x := &castExport{tsPath: tsPath, ts: bufio.NewReaderSize(io.NewSectionReader(ts, 0, tsSize), castChunk)}
	if err := x.skipHeaderLine(tsSize, body); err != nil {
		return err
	}
	if _, err := tm.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("recorder: export asciicast: %s: %w", tmPath, err)
	}
	bw := bufio.NewWriter(w)
	x.enc = json.NewEncoder(bw)
	x.enc.SetEscapeHTML(false)
	if err := x.enc.Encode(hdr); err != nil {
		return fmt.Errorf("recorder: export asciicast: %w", err)
	}
	if err := scanTiming(tm, tmPath, x.entry); err != nil {
		return err
	}
	if err := x.flush(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("recorder: export asciicast: %w", err)
	}
	return nil
}

// castHeader is the first line of an asciicast v2 file.
type castHeader struct {
	Version   int               `json:"version"`
	Width     int               `json:"width"`
	Height    int               `json:"height"`
	Timestamp int64             `json:"timestamp,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Title     string            `json:"title,omitempty"`
}

// scanCastHeader reads the whole timing file, checking every line, and
// builds the header from the first H entry of each name it uses. It
// returns the bytes of I and O entries, which the typescript must hold.
// Header values it cannot use (a COLUMNS that is no number) fall back to
// the defaults: they do not make the record unreadable.
func scanCastHeader(tm io.Reader, path string) (castHeader, int64, error) {
	h := castHeader{Version: 2, Width: castDefaultWidth, Height: castDefaultHeight}
	hs := map[string]string{}
	var body int64
	err := scanTiming(tm, path, func(e timingEntry) error {
		switch e.kind {
		case 'H':
			if _, ok := hs[e.name]; !ok {
				hs[e.name] = unescapeHeaderValue(e.value)
			}
		case 'I', 'O':
			body += e.n
		}
		return nil
	})
	if err != nil {
		return h, 0, err
	}
	if n, err := strconv.Atoi(hs["COLUMNS"]); err == nil && n > 0 {
		h.Width = n
	}
	if n, err := strconv.Atoi(hs["LINES"]); err == nil && n > 0 {
		h.Height = n
	}
	if t, err := time.Parse(timeLayout, hs["START_TIME"]); err == nil {
		h.Timestamp = t.Unix()
	}
	if term := hs["TERM"]; term != "" {
		h.Env = map[string]string{"TERM": term}
	}
	var ids []string
	for _, name := range []string{"APTL_RUN_ID", "APTL_SESSION_ID"} {
		if v := hs[name]; v != "" {
			ids = append(ids, v)
		}
	}
	h.Title = strings.Join(ids, "/")
	return h, body, nil
}

// unescapeHeaderValue undoes appendEscaped, whose escapes are Go's. A value
// it did not write (or a truncated one) is returned as it is.
func unescapeHeaderValue(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	s, err := strconv.Unquote(`"` + strings.ReplaceAll(v, `"`, `\"`) + `"`)
	if err != nil {
		return v
	}
	return s
}

// timingEntry is one parsed timing line.
type timingEntry struct {
	kind        byte  // 'H', 'I', 'O' or 'S'
	delay       int64 // microseconds since the previous entry
	n           int64 // I, O: bytes
	name, value string
	rows, cols  int // S SIGWINCH
}

// scanTiming calls fn for each line of a timing file; an error names the
// file and the line.
func scanTiming(r io.Reader, path string, fn func(timingEntry) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxTimingLine)
	line := 0
	for sc.Scan() {
		line++
		e, err := parseTimingLine(sc.Text())
		if err == nil {
			err = fn(e)
		}
		if err != nil {
			return fmt.Errorf("recorder: export asciicast: %s:%d: %w", path, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("recorder: export asciicast: %s:%d: %w", path, line+1, err)
	}
	return nil
}

var errBadTiming = errors.New("not a script timing line")

// parseTimingLine parses `H <delay> NAME[ VALUE]`, `I|O <delay> <n>` or
// `S <delay> SIGNAME [ROWS=r COLS=c]` (util-linux script, advanced format).
func parseTimingLine(s string) (timingEntry, error) {
	bad := func(what string) (timingEntry, error) {
		return timingEntry{}, fmt.Errorf("%w (%s): %.60q", errBadTiming, what, s)
	}
	kind, rest, ok := strings.Cut(s, " ")
	if !ok || len(kind) != 1 || !strings.Contains("HIOS", kind) {
		return bad("kind")
	}
	d, rest, _ := strings.Cut(rest, " ")
	sec, err := strconv.ParseFloat(d, 64)
	if err != nil || !(sec >= 0 && sec <= maxCastDelay) {
		return bad("delay")
	}
	e := timingEntry{kind: kind[0], delay: int64(math.Round(sec * 1e6))}
	switch e.kind {
	case 'H':
		e.name, e.value, _ = strings.Cut(rest, " ")
		if e.name == "" {
			return bad("header name")
		}
	case 'I', 'O':
		if e.n, err = strconv.ParseInt(rest, 10, 64); err != nil || e.n < 0 {
			return bad("byte count")
		}
	case 'S':
		f := strings.Fields(rest)
		if len(f) == 0 {
			return bad("signal")
		}
		if f[0] == "SIGWINCH" && !parseWinch(f[1:], &e) {
			return bad("window size")
		}
		e.name = f[0]
	}
	return e, nil
}

// parseWinch reads ROWS=r COLS=c, in either order.
func parseWinch(f []string, e *timingEntry) bool {
	for _, kv := range f {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > math.MaxUint16 {
			return false
		}
		switch k {
		case "ROWS":
			e.rows = n
		case "COLS":
			e.cols = n
		default:
			return false
		}
	}
	return len(f) == 2
}

// castExport writes the events.
type castExport struct {
	tsPath string
	ts     *bufio.Reader // the typescript body, consumed in timing order
	off    int64         // typescript offset of ts
	enc    *json.Encoder
	t      int64      // microseconds since the start
	out    utf8Stream // "o"
	in     utf8Stream // "i"
	buf    []byte
}

// skipHeaderLine consumes script's header line and checks that the
// typescript, of size bytes, holds the body bytes the timing accounts for.
func (x *castExport) skipHeaderLine(size, body int64) error {
	for {
		chunk, err := x.ts.ReadSlice('\n')
		x.off += int64(len(chunk))
		if err == nil {
			break
		}
		if x.off > maxScriptHeaderLine {
			return fmt.Errorf("recorder: export asciicast: %s: no header line within %d bytes", x.tsPath, maxScriptHeaderLine)
		}
		if err != bufio.ErrBufferFull {
			return fmt.Errorf("recorder: export asciicast: %s: no header line: %w", x.tsPath, err)
		}
	}
	if size-x.off < body {
		return fmt.Errorf("recorder: export asciicast: %s: %d bytes after the header line, the timing accounts for %d",
			x.tsPath, size-x.off, body)
	}
	return nil
}

// entry writes the events of one timing entry.
func (x *castExport) entry(e timingEntry) error {
	if x.t += e.delay; x.t > maxCastDelay*1e6 {
		return fmt.Errorf("the recording lasts more than %g seconds", float64(maxCastDelay))
	}
	switch e.kind {
	case 'I', 'O':
		return x.data(e)
	case 'S':
		if e.name == "SIGWINCH" {
			return x.event("r", fmt.Sprintf("%dx%d", e.cols, e.rows))
		}
	}
	return nil
}

// data reads an entry's bytes from the typescript in chunks of at most
// castChunk, each one event.
func (x *castExport) data(e timingEntry) error {
	typ, st := "o", &x.out
	if e.kind == 'I' {
		typ, st = "i", &x.in
	}
	for left := e.n; left > 0; {
		n := min(left, castChunk)
		if cap(x.buf) < int(n) {
			x.buf = make([]byte, castChunk)
		}
		p := x.buf[:n]
		if _, err := io.ReadFull(x.ts, p); err != nil {
			return fmt.Errorf("typescript %s ends at offset %d, inside this entry: %w", x.tsPath, x.off, err)
		}
		x.off += n
		left -= n
		if text := st.text(p, false); text != "" {
			if err := x.event(typ, text); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush writes what is left of each stream: an incomplete character at
// the end of the session, as U+FFFD.
func (x *castExport) flush() error {
	if text := x.out.text(nil, true); text != "" {
		if err := x.event("o", text); err != nil {
			return err
		}
	}
	if text := x.in.text(nil, true); text != "" {
		return x.event("i", text)
	}
	return nil
}

func (x *castExport) event(typ, data string) error {
	t := json.Number(fmt.Sprintf("%d.%06d", x.t/1e6, x.t%1e6))
	if err := x.enc.Encode([]any{t, typ, data}); err != nil {
		return fmt.Errorf("recorder: export asciicast: %w", err)
	}
	return nil
}

// utf8Stream decodes one stream's bytes as UTF-8 across chunk boundaries.
type utf8Stream struct {
	tail []byte // start of a character the next chunk may complete
}

// text returns the valid UTF-8 text of tail and p, holding back an
// incomplete character at the end unless final; each invalid byte becomes
// U+FFFD.
func (u *utf8Stream) text(p []byte, final bool) string {
	b := p
	if len(u.tail) > 0 {
		b = append(u.tail, p...)
	}
	u.tail = nil
	if !final {
		if k := incompleteSuffix(b); k > 0 {
			u.tail = append([]byte(nil), b[len(b)-k:]...)
			b = b[:len(b)-k]
		}
	}
	var sb strings.Builder
	sb.Grow(len(b))
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			sb.WriteRune(utf8.RuneError)
		} else {
			sb.Write(b[:size])
		}
		b = b[size:]
	}
	return sb.String()
}

// incompleteSuffix returns the length of the start of a character that b
// ends with and that more bytes could complete, or 0.
func incompleteSuffix(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-(utf8.UTFMax-1); i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return 0
			}
			return len(b) - i
		}
	}
	return 0
}
