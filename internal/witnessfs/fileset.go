package witnessfs

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/writeback"
)

// A witness keeps one session's evidence in rotated files: Name(1),
// Name(2), ... in its folder of the session, each at most
// Limits.RotateBytes. Past Limits.Files the first files are kept and
// later items are only counted (the witness's gap record says how many):
// the files already finished are signed in the chain, and deleting signed
// evidence to make room would turn a verified record into a missing file.
// Each file's size and SHA-256 are kept as it is written, so the records
// vouch for the files without reading them back.

// Limits are a witness's rotation settings.
type Limits struct {
	RotateBytes int64
	Files       int
}

// FileSet writes one session's files of one witness. The witness encodes
// its items (packets, events) into the File that Next gives it and counts
// what was not stored; FileSet names, creates, rotates, digests, syncs and
// closes the files and keeps their records (FileRecord) until taken. A
// write error is sticky: it ends storing for the session (Err).
type FileSet struct {
	Class     string             // the prefix of its error texts: vocab.ClassPcap
	Name      func(n int) string // the n-th file's name, n from 1
	CountAttr string             // what File.Stored counts: vocab.AttrPackets
	// Buffer is the user-space buffer of the current file, flushed at each
	// Sync; 0: every Write is one write(2), so a crash of the sidecar loses
	// nothing already written.
	Buffer int
	Limits Limits
	Create func(name string) (*os.File, error) // makes a new file 0600 in the witness's folder

	made     int
	cur      *File
	finished []FileRecord // not yet taken
	err      error
}

// File is the file being written. It is an io.Writer: what it takes is
// in its size and digest.
type File struct {
	Name        string
	f           *os.File
	w           io.Writer     // f, or buf
	buf         *bufio.Writer // nil without FileSet.Buffer
	sum         hash.Hash
	size        int64 // bytes written, buffered ones included
	count       int64
	first, last time.Time
}

// Next returns the file that need more bytes go into: the current one, or,
// when they would take the current one past Limits.RotateBytes and it
// holds something already, a new one. It returns nil when they are not to
// be stored: full when Limits.Files are made, otherwise after a write
// error (Err says which). A witness that buffers in its own encoder
// writes everything to the File before it calls Next, so the size is
// exact.
func (s *FileSet) Next(need int64) (f *File, full bool) {
	if s.err != nil {
		return nil, false
	}
	if s.cur != nil && s.cur.count > 0 && s.cur.size+need > s.Limits.RotateBytes {
		s.Finish()
	}
	if s.cur == nil {
		if s.made >= s.Limits.Files {
			return nil, true
		}
		s.made++
		name := s.Name(s.made)
		f, err := s.Create(name)
		if err != nil {
			s.err = fmt.Errorf("%s: create %s: %w", s.Class, name, err)
			return nil, false
		}
		s.cur = &File{Name: name, f: f, w: f, sum: sha256.New()}
		if s.Buffer > 0 {
			s.cur.buf = bufio.NewWriterSize(f, s.Buffer)
			s.cur.w = s.cur.buf
		}
	}
	return s.cur, false
}

// Write writes p to the file, through the buffer when there is one.
func (f *File) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	f.sum.Write(p[:n])
	f.size += int64(n)
	return n, err
}

// Stored counts n items written whole, the last of them of time t.
func (f *File) Stored(n int64, t time.Time) {
	if f.count == 0 {
		f.first = t
	}
	f.count += n
	f.last = t
}

// Fail ends storing for the session with err; the witness wraps err with
// what it was writing.
func (s *FileSet) Fail(err error) { s.err = err }

// Err is the error that ended storing, if one did.
func (s *FileSet) Err() error { return s.err }

// Made is how many files were made.
func (s *FileSet) Made() int { return s.made }

// flush writes the buffer to the file.
func (s *FileSet) flush(f *File) error {
	if f.buf == nil {
		return nil
	}
	if err := f.buf.Flush(); err != nil {
		return fmt.Errorf("%s: write %s: %w", s.Class, f.Name, err)
	}
	return nil
}

// Sync flushes the current file and makes it durable; it returns the
// file's name, size and running digest for the checkpoint, or "" when no
// file is open.
func (s *FileSet) Sync() (name string, size int64, sum string) {
	f := s.cur
	if f == nil {
		return "", 0, ""
	}
	if s.err == nil {
		err := s.flush(f)
		if err == nil {
			err = writeback.Sync(f.f)
		}
		s.err = err
	}
	return f.Name, f.size, hex.EncodeToString(f.sum.Sum(nil))
}

// Finish flushes, syncs and closes the current file and keeps its record;
// an error that ended storing, first, and one of these are the record's
// write_error.
func (s *FileSet) Finish() {
	f := s.cur
	if f == nil {
		return
	}
	s.cur = nil
	errs := []error{s.err}
	if s.err == nil {
		errs = append(errs, s.flush(f), writeback.Sync(f.f))
	}
	errs = append(errs, f.f.Close())
	rec := FileRecord{Name: f.Name, CountAttr: s.CountAttr, Count: f.count, Size: f.size, SHA256: hex.EncodeToString(f.sum.Sum(nil)), First: f.first, Last: f.last}
	if err := errors.Join(errs...); err != nil {
		s.err = err
		rec.WriteFailure = err.Error()
	}
	s.finished = append(s.finished, rec)
}

// TakeFinished returns the records of the files finished since the last call.
func (s *FileSet) TakeFinished() []FileRecord {
	r := s.finished
	s.finished = nil
	return r
}
