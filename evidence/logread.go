package evidence

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// maxLogSize bounds the log the verifier reads (metadata is a small
// fraction of the transcript; a larger log is itself an anomaly).
const maxLogSize = 1 << 30

// MaxRecordLine bounds one line of a log or recovery file. The largest
// records the sidecar writes are the open record (the exec command, at
// most 64 KiB as broker/requests.go bounds it, plus provenance headers of
// at most 4 KiB each as recorder/format.go bounds them) and an exec
// request record (the same command): JSON escaping can grow a byte to six
// ("\u001b"), so about 0.5 MiB at worst. 4 MiB leaves a wide margin while
// a forged gigabyte line costs the reader 4 MiB, not the gigabyte.
const MaxRecordLine = 4 << 20

// errRecordTooLong is a line past MaxRecordLine.
var errRecordTooLong = fmt.Errorf("record longer than %d bytes (the bound of one record)", MaxRecordLine)

// logLine is one line of the log with where it starts.
type logLine struct {
	off      int64
	text     []byte
	complete bool // ended by a newline
}

// logReader reads a log line by line, never holding more than one line
// of at most MaxRecordLine bytes, and never past the size the file had
// when it was opened.
type logReader struct {
	f    *os.File
	br   *bufio.Reader
	size int64 // the file's size when opened: the bound of every loop over its lines
	off  int64
	err  error // sticky: after a long line or a read error nothing follows
}

// errLineBound is a loop over the lines that read more of them than the
// file has bytes, which a line (at least its newline, or the last byte)
// cannot be: a reader that stopped advancing. The loops end on it rather
// than spin.
var errLineBound = errors.New("read more lines than the log has bytes")

// maxLines is the bound of a loop over the log's lines: one a byte, and
// the read that finds the end (a log of n newlines is n lines, then EOF).
func (r *logReader) maxLines() int64 { return r.size + 1 }

// openLog opens the file name of a session's pty directory (safefs.OpenRegular).
func openLog(files sessionFiles, name string) (*logReader, error) {
	f, size, err := files.open(name)
	if err != nil {
		return nil, err
	}
	if size > maxLogSize {
		f.Close()
		return nil, fmt.Errorf("%s is %d bytes, larger than the %d a log may be", name, size, maxLogSize)
	}
	return &logReader{f: f, br: newLineReader(io.NewSectionReader(f, 0, size)), size: size}, nil
}

func newLineReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 64<<10) }

func (r *logReader) Close() error { return r.f.Close() }

// next returns the next line, io.EOF after the last one, or an error
// wrapping errRecordTooLong for a line past the bound (read no further).
func (r *logReader) next() (logLine, error) {
	if r.err != nil {
		return logLine{}, r.err
	}
	ln, err := readBoundedLine(r.br, MaxRecordLine)
	ln.off = r.off
	r.off += int64(len(ln.text))
	if ln.complete {
		r.off++
	}
	if errors.Is(err, errRecordTooLong) {
		err = fmt.Errorf("offset %d: %w", ln.off, err)
	}
	if err != nil {
		r.err = err
	}
	return ln, err
}

// readBoundedLine reads one line of at most max bytes (without its
// newline). It reads at most max+1 bytes past the line's start.
func readBoundedLine(br *bufio.Reader, max int) (logLine, error) {
	var text []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(text)+len(chunk) > max+1 || (len(text)+len(chunk) == max+1 && !bytes.HasSuffix(chunk, []byte("\n"))) {
			return logLine{}, errRecordTooLong
		}
		text = append(text, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(text) == 0:
			return logLine{}, io.EOF
		case err != nil && err != io.EOF:
			return logLine{}, err
		}
		line, complete := bytes.CutSuffix(text, []byte("\n"))
		return logLine{text: line, complete: complete}, nil
	}
}

// readRecords calls fn with each line of dir's log file name, stopping at
// the end, at the first error (returned), or when fn returns false.
func readRecords(files sessionFiles, name string, fn func(i int, ln logLine) bool) error {
	lr, err := openLog(files, name)
	if err != nil {
		return err
	}
	defer lr.Close()
	for i := 0; int64(i) < lr.maxLines(); i++ {
		ln, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !fn(i, ln) {
			return nil
		}
	}
	return fmt.Errorf("%s: %w", name, errLineBound)
}

// ReadRecords calls fn with each line of the file name (vocab.LogFile or
// vocab.RecoveryFile) of the session in dir, its text without the newline
// and whether a newline ended it, stopping at the end, at the first error
// (returned), or when fn returns false. It reads the file as the verifier
// does (safefs.OpenRegular, one line of at most MaxRecordLine at a time)
// and verifies nothing: session listings read the log through it.
func ReadRecords(dir, name string, fn func(i int, text []byte, complete bool) bool) error {
	return readRecords(sessionFiles{dir: dir}, name, func(i int, ln logLine) bool { return fn(i, ln.text, ln.complete) })
}

// VerifiedRecords decodes the first n records of the log of the session
// in dir, which Verify has checked (Report.SignedRecords of its report):
// the run reconciler compares what they record with the tool server's tee.
func VerifiedRecords(dir string, n int) ([]integrity.Record, error) {
	recs := make([]integrity.Record, 0, n)
	var derr error
	err := readRecords(sessionFiles{dir: dir}, vocab.LogFile, func(i int, ln logLine) bool {
		if i >= n {
			return false
		}
		var r integrity.Record
		if derr = json.Unmarshal(ln.text, &r); derr != nil {
			derr = fmt.Errorf("record %d: %w", i, derr)
			return false
		}
		recs = append(recs, r)
		return true
	})
	switch {
	case err != nil:
		return nil, err
	case derr != nil:
		return nil, derr
	case len(recs) < n:
		return nil, fmt.Errorf("log has %d records, %d verified", len(recs), n)
	}
	return recs, nil
}
