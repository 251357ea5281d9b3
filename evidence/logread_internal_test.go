package evidence

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestReadBoundedLineEdges: a line of exactly max bytes is read, with or
// without its newline; one byte more is refused, and nothing past it is
// returned as a line.
func TestReadBoundedLineEdges(t *testing.T) {
	const max = 8
	for _, tc := range []struct {
		in       string
		text     string
		complete bool
		tooLong  bool
	}{
		{"12345678\n", "12345678", true, false},
		{"12345678", "12345678", false, false},
		{"123456789\n", "", false, true},
		{"123456789", "", false, true},
		{"\n", "", true, false},
	} {
		ln, err := readBoundedLine(bufio.NewReaderSize(strings.NewReader(tc.in), 16), max)
		switch {
		case tc.tooLong && !errors.Is(err, errRecordTooLong):
			t.Errorf("%q: %+v, %v; want refused as too long", tc.in, ln, err)
		case !tc.tooLong && (err != nil || string(ln.text) != tc.text || ln.complete != tc.complete):
			t.Errorf("%q: text %q complete %v (%v); want %q complete %v", tc.in, ln.text, ln.complete, err, tc.text, tc.complete)
		}
	}
}

// TestLogReaderOffsetsAndStickyError: each line carries the offset it
// starts at, counting the newlines before it; after a line past the
// bound the reader returns that error again and reads no further, even
// where a good line follows; readRecords numbers lines from 0.
func TestLogReaderOffsetsAndStickyError(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, vocab.PTYDir), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(body string) {
		if err := os.WriteFile(filepath.Join(dir, vocab.PTYDir, vocab.LogFile), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a\nbb\nccc")
	var offs []int64
	var idx []int
	err := readRecords(sessionFiles{dir: dir}, vocab.LogFile, func(i int, ln logLine) bool {
		offs, idx = append(offs, ln.off), append(idx, i)
		return true
	})
	if err != nil || len(offs) != 3 || offs[0] != 0 || offs[1] != 2 || offs[2] != 5 || idx[0] != 0 || idx[1] != 1 || idx[2] != 2 {
		t.Errorf("lines at offsets %v numbered %v (%v), want 0, 2, 5 numbered 0, 1, 2", offs, idx, err)
	}

	write(strings.Repeat("x", MaxRecordLine+1) + "\n{}\n")
	lr, err := openLog(sessionFiles{dir: dir}, vocab.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	defer lr.Close()
	_, first := lr.next()
	ln, second := lr.next()
	if !errors.Is(first, errRecordTooLong) || !errors.Is(second, errRecordTooLong) || ln.text != nil {
		t.Errorf("after a line past the bound: %v, then %q, %v; want the same refusal twice and no line", first, ln.text, second)
	}
	if _, err := lr.next(); errors.Is(err, io.EOF) {
		t.Error("the reader read on to the end after refusing a line")
	}
}

// TestLogSizeBound: a log of exactly maxLogSize bytes is opened, one byte
// more is refused before any is read (sparse files: nothing is written).
func TestLogSizeBound(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, vocab.PTYDir), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, vocab.PTYDir, vocab.LogFile)
	for _, size := range []int64{maxLogSize, maxLogSize + 1} {
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, size); err != nil {
			t.Skipf("a sparse file of %d bytes: %v", size, err)
		}
		lr, err := openLog(sessionFiles{dir: dir}, vocab.LogFile)
		if err == nil {
			lr.Close()
		}
		if tooBig := size > maxLogSize; tooBig != (err != nil) || tooBig && !strings.Contains(err.Error(), "larger than") {
			t.Errorf("a %d-byte log: %v; want refused only past %d", size, err, int64(maxLogSize))
		}
	}
}

// TestLineLoopsReachTheEnd: the loops over a log's lines are bounded by
// its size (a line is at least a byte), and the bound is tight, not
// short: a log of n newlines, the most lines n bytes hold, is read to its
// end.
//
// Equivalent mutant (gremlins): the loops' `< lr.maxLines()` -> `<=`: one
// read more than a log can hold lines, which finds the end first.
func TestLineLoopsReachTheEnd(t *testing.T) {
	dir := t.TempDir()
	pty := filepath.Join(dir, vocab.PTYDir)
	if err := os.MkdirAll(pty, 0o700); err != nil {
		t.Fatal(err)
	}
	const n = 5
	if err := os.WriteFile(filepath.Join(pty, vocab.LogFile), []byte(strings.Repeat("\n", n)), 0o600); err != nil {
		t.Fatal(err)
	}
	lines := 0
	if err := readRecords(sessionFiles{dir: dir}, vocab.LogFile, func(int, logLine) bool { lines++; return true }); err != nil || lines != n {
		t.Errorf("a log of %d newlines: %d lines read, %v; want all %d and its end", n, lines, err, n)
	}
}
