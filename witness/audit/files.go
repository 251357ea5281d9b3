package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/internal/witnessfs"
)

// A session's audit files: audit-000001.log, audit-000002.log, ... in
// <session>/audit/, each at most Limits.RotateBytes, in auditd's log
// format. Past Limits.Files the first files are kept and later events
// only counted (a gap record says how many), as the pcap witness does:
// deleting signed evidence to make room would turn a verified record into
// a missing file. Each event is one write(2), no user-space buffer, so a
// crash of the sidecar loses nothing already written.

// FileName returns the name of a session's n-th audit file (n from 1).
func FileName(n int) string { return fmt.Sprintf("audit-%06d.log", n) }

// Limits are the rotation settings, of the session files and of
// _audit/audit.log.
type Limits struct {
	RotateBytes int64
	Files       int
}

// Defaults of the rotation settings.
const (
	DefaultRotateMB = 100
	DefaultFiles    = 10
)

// counted is a count of events not stored.
type counted struct{ events, records int64 }

func (c *counted) add(e *Event) {
	c.events++
	c.records += int64(len(e.Records))
}

// auditFile is the file being written.
type auditFile struct {
	name          string
	f             *os.File
	sum           hash.Hash
	size, records int64
	first, last   time.Time
}

// fileSet writes one session's events into its rotated files.
type fileSet struct {
	create   func(name string) (*os.File, error) // makes a new file 0600 in the audit folder
	limits   Limits
	made     int
	cur      *auditFile
	finished []witnessfs.FileRecord // not yet emitted
	// rotated counts events past limits.Files; failed those after a write
	// error, which ends storing for the session.
	rotated, failed counted
	err             error
	line            []byte
}

// write stores the event's lines, rotating first when they would not fit.
func (s *fileSet) write(e *Event) {
	if s.err != nil {
		s.failed.add(e)
		return
	}
	s.line = e.AppendLog(s.line[:0])
	if s.cur != nil && s.cur.records > 0 && s.cur.size+int64(len(s.line)) > s.limits.RotateBytes {
		s.finish()
	}
	if s.cur == nil {
		if s.made >= s.limits.Files {
			s.rotated.add(e)
			return
		}
		s.made++
		name := FileName(s.made)
		f, err := s.create(name)
		if err != nil {
			s.err = fmt.Errorf("audit: create %s: %w", name, err)
			s.failed.add(e)
			return
		}
		s.cur = &auditFile{name: name, f: f, sum: sha256.New(), first: e.Time}
	}
	n, err := s.cur.f.Write(s.line)
	s.cur.sum.Write(s.line[:n])
	s.cur.size += int64(n)
	if err != nil {
		s.err = fmt.Errorf("audit: write %s: %w", s.cur.name, err)
		s.failed.add(e)
		return
	}
	s.cur.records += int64(len(e.Records))
	s.cur.last = e.Time
}

// sync makes the current file durable and returns its name, size and
// running digest ("" when none is open).
func (s *fileSet) sync() (name string, size int64, sum string) {
	f := s.cur
	if f == nil {
		return "", 0, ""
	}
	if s.err == nil {
		if err := f.f.Sync(); err != nil {
			s.err = fmt.Errorf("audit: fsync %s: %w", f.name, err)
		}
	}
	return f.name, f.size, hex.EncodeToString(f.sum.Sum(nil))
}

// finish syncs and closes the current file and queues its record.
func (s *fileSet) finish() {
	f := s.cur
	if f == nil {
		return
	}
	s.cur = nil
	var errs []error
	if s.err == nil {
		errs = append(errs, f.f.Sync())
	}
	errs = append(errs, f.f.Close(), s.err)
	rec := witnessfs.FileRecord{Name: f.name, CountAttr: vocab.AttrRecords, Count: f.records, Size: f.size, SHA256: hex.EncodeToString(f.sum.Sum(nil)), First: f.first, Last: f.last}
	if err := errors.Join(errs...); err != nil {
		s.err = err
		rec.WriteFailure = err.Error()
	}
	s.finished = append(s.finished, rec)
}

func (s *fileSet) takeFinished() []witnessfs.FileRecord {
	r := s.finished
	s.finished = nil
	return r
}
