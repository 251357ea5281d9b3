package examine

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

const (
	// castDefaultWidth and castDefaultHeight size a session without a PTY.
	castDefaultWidth, castDefaultHeight = 80, 24
	// CastChunk bounds the bytes of one event: a longer timing entry
	// becomes several events at the same time.
	CastChunk = 64 << 10
	// maxCastTime bounds the recording's length (about 31 years), so the
	// running total of delays cannot overflow.
	maxCastTime = scriptfmt.MaxDelaySeconds * time.Second
)

// CastOptions are the choices of an asciicast export.
type CastOptions struct {
	// Input adds the typed input as "i" events. It is off by default, as
	// `asciinema rec` leaves stdin out unless --stdin is given: the input
	// stream holds every byte typed, including what the terminal did not
	// echo (passwords read with `read -s`, sudo's prompt), and an export is
	// made to be shared.
	Input bool
}

// ExportAsciicast writes the session in dir as an asciicast v2 recording
// (https://docs.asciinema.org/manual/asciicast/v2/) that `asciinema cat` and
// `asciinema play` accept: a header line with the terminal size, start
// time, TERM and a "<run>/<session>" title, then one event per timing
// entry: [t, "o", text] for output (stderr included), [t, "i", text] for
// input when opts.Input is set, and [t, "r", "COLSxROWS"] for a window
// change, t in seconds since the start. Without opts.Input the input
// bytes are skipped in the typescript and leave no event.
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
func ExportAsciicast(dir string, w io.Writer, opts CastOptions) error {
	tmPath := filepath.Join(dir, vocab.PTYDir, vocab.TimingFile)
	tsPath := filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile)
	// Both files are opened as the verifier opens them: regular files
	// only, no link followed, read no further than their size at open.
	tmFile, tmSize, err := safefs.OpenRegular(dir, vocab.PTYDir+"/"+vocab.TimingFile)
	if err != nil {
		return err
	}
	defer tmFile.Close()
	tm := io.NewSectionReader(tmFile, 0, tmSize)
	hdr, body, err := scanCastHeader(tm, tmPath)
	if err != nil {
		return err
	}
	ts, tsSize, err := safefs.OpenRegular(dir, vocab.PTYDir+"/"+vocab.TypescriptFile)
	if err != nil {
		return err
	}
	defer ts.Close()
	x := &castExport{input: opts.Input, tsPath: tsPath, ts: bufio.NewReaderSize(io.NewSectionReader(ts, 0, tsSize), CastChunk)}
	if err := x.skipHeaderLine(tsSize, body); err != nil {
		return err
	}
	if _, err := tm.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("%s: %w", tmPath, err)
	}
	bw := bufio.NewWriter(w)
	x.enc = NewJSONEncoder(bw)
	x.enc.SetEscapeHTML(false)
	if err := x.enc.Encode(hdr); err != nil {
		return err
	}
	if err := scanTiming(tm, tmPath, x.entry); err != nil {
		return err
	}
	if err := x.flush(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
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
	err := scanTiming(tm, path, func(e scriptfmt.Entry) error {
		switch e.Kind {
		case 'H':
			if _, ok := hs[e.Name]; !ok {
				hs[e.Name] = scriptfmt.UnescapeHeaderValue(e.Value)
			}
		case 'I', 'O':
			body += e.N
		}
		return nil
	})
	if err != nil {
		return h, 0, err
	}
	if n, err := strconv.Atoi(hs[vocab.ScriptColumns]); err == nil && n > 0 {
		h.Width = n
	}
	if n, err := strconv.Atoi(hs[vocab.ScriptLines]); err == nil && n > 0 {
		h.Height = n
	}
	if t, err := time.Parse(scriptfmt.TimeLayout, hs[vocab.ScriptStartTime]); err == nil {
		h.Timestamp = t.Unix()
	}
	if term := hs["TERM"]; term != "" {
		h.Env = map[string]string{"TERM": term}
	}
	var ids []string
	for _, name := range []string{vocab.HeaderRunID, vocab.HeaderSessionID} {
		if v := hs[name]; v != "" {
			ids = append(ids, v)
		}
	}
	h.Title = strings.Join(ids, "/")
	return h, body, nil
}

// scanTiming checks and reads a timing file with the one parser of the
// format; an error names the file and the line.
func scanTiming(r io.Reader, path string, fn func(scriptfmt.Entry) error) error {
	if err := scriptfmt.Scan(r, path, fn); err != nil {
		return err
	}
	return nil
}

// castExport writes the events.
type castExport struct {
	input  bool // write "i" events (CastOptions.Input)
	tsPath string
	ts     *bufio.Reader // the typescript body, consumed in timing order
	off    int64         // typescript offset of ts
	enc    *json.Encoder
	t      time.Duration // since the start
	out    utf8Stream    // "o"
	in     utf8Stream    // "i"
	buf    []byte
}

// skipHeaderLine consumes script's start line and checks that the
// typescript, of size bytes, holds the body bytes the timing accounts for.
func (x *castExport) skipHeaderLine(size, body int64) error {
	n, err := scriptfmt.ReadStartLine(x.ts)
	x.off += n
	if err != nil {
		return fmt.Errorf("%s: %w", x.tsPath, err)
	}
	if size-x.off < body {
		return fmt.Errorf("%s: %d bytes after the header line, the timing accounts for %d",
			x.tsPath, size-x.off, body)
	}
	return nil
}

// entry writes the events of one timing entry.
func (x *castExport) entry(e scriptfmt.Entry) error {
	if x.t += e.Delay; x.t > maxCastTime {
		return fmt.Errorf("the recording lasts more than %v", maxCastTime)
	}
	switch e.Kind {
	case 'I', 'O':
		return x.data(e)
	case 'S':
		return x.event("r", fmt.Sprintf("%dx%d", e.Cols, e.Rows))
	}
	return nil
}

// data reads an entry's bytes from the typescript in chunks of at most
// CastChunk, each one event.
func (x *castExport) data(e scriptfmt.Entry) error {
	typ, st := "o", &x.out
	if e.Kind == 'I' {
		if !x.input {
			return x.skip(e.N)
		}
		typ, st = "i", &x.in
	}
	for left := e.N; left > 0; {
		n := min(left, CastChunk)
		if cap(x.buf) < int(n) {
			x.buf = make([]byte, CastChunk)
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

// skip passes over n typescript bytes that leave no event (the input,
// unless CastOptions.Input).
func (x *castExport) skip(n int64) error {
	got, err := io.CopyN(io.Discard, x.ts, n)
	x.off += got
	if err != nil {
		return fmt.Errorf("typescript %s ends at offset %d, inside this entry: %w", x.tsPath, x.off, err)
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
	t := json.Number(scriptfmt.AppendSeconds(nil, x.t))
	if err := x.enc.Encode([]any{t, typ, data}); err != nil {
		return err
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
