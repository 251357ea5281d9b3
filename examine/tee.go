package examine

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
)

// The tool server's tee: one JSON line per chunk its client received,
// {"ts": <epoch ms>, "dir": "out"|"err", "b64": "<bytes>"}, read as one
// byte stream per direction.

// teeLineError is a malformed tee line.
type teeLineError struct {
	line int
	off  int64 // where the line starts in the tee
	msg  string
}

func (e *teeLineError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// teeStream reads a tee line by line. As an io.Reader it yields the
// decoded bytes of one direction, skipping malformed lines, which scanTee
// reports.
type teeStream struct {
	f     *os.File
	br    *bufio.Reader
	dir   string // the direction Read yields
	line  int    // number of the line last read, from 1
	start int64  // offset of the line last read
	off   int64  // offset of the next line
	buf   []byte // bytes of the direction not yet returned by Read
}

// openTee opens the tee at path as every evidence file is opened
// (OpenRegular: not through a link, not a pipe), reading no further than
// its size at open.
func openTee(path, dir string) (*teeStream, error) {
	f, size, err := safefs.OpenRegular(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return nil, err
	}
	return &teeStream{f: f, br: bufio.NewReaderSize(io.NewSectionReader(f, 0, size), compareChunk), dir: dir}, nil
}

func (t *teeStream) Close() error { return t.f.Close() }

func (t *teeStream) Read(p []byte) (int, error) {
	if err := t.fill(); err != nil {
		return 0, err
	}
	n := copy(p, t.buf)
	t.buf = t.buf[n:]
	return n, nil
}

// fill makes buf hold the next bytes of the direction; at its end it
// returns io.EOF.
func (t *teeStream) fill() error {
	var le *teeLineError
	for len(t.buf) == 0 {
		dir, data, err := t.next()
		switch {
		case errors.As(err, &le):
		case err != nil:
			return err
		case dir == t.dir:
			t.buf = data
		}
	}
	return nil
}

// teeLine is one line of a tee as the tool server writes it.
type teeLine struct {
	TS  *float64 `json:"ts"`
	Dir string   `json:"dir"`
	B64 *string  `json:"b64"`
}

// next reads one line and returns its direction and bytes, a
// *teeLineError when it is malformed, or io.EOF after the last line.
func (t *teeStream) next() (string, []byte, error) {
	text, long, err := t.readLine()
	if err != nil {
		return "", nil, err
	}
	bad := func(format string, args ...any) (string, []byte, error) {
		return "", nil, &teeLineError{line: t.line, off: t.start, msg: fmt.Sprintf(format, args...)}
	}
	if long {
		return bad("longer than %d bytes", maxTeeLine)
	}
	var l teeLine
	if err := json.Unmarshal(text, &l); err != nil {
		return bad("does not parse: %v", err)
	}
	if l.TS == nil || l.B64 == nil || (l.Dir != "out" && l.Dir != "err") {
		return bad(`want {"ts": <epoch ms>, "dir": "out"|"err", "b64": "<base64>"}`)
	}
	data, err := base64.StdEncoding.DecodeString(*l.B64)
	if err != nil {
		return bad("b64: %v", err)
	}
	return l.Dir, data, nil
}

// readLine returns the next line without its newline. A line longer than
// maxTeeLine is read past and reported as long, without its text.
func (t *teeStream) readLine() (line []byte, long bool, err error) {
	t.start = t.off
	for {
		chunk, err := t.br.ReadSlice('\n')
		t.off += int64(len(chunk))
		if long = long || len(line)+len(chunk) > maxTeeLine+1; long {
			line = nil
		} else {
			line = append(line, chunk...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err != nil && err != io.EOF:
			return nil, false, err
		case t.off == t.start:
			return nil, false, io.EOF
		}
		t.line++
		return bytes.TrimSuffix(line, []byte("\n")), long, nil
	}
}
