package audit

import (
	"fmt"
	"os"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/internal/witnessfs"
)

// A session's audit files: audit-000001.log, audit-000002.log, ... in
// <session>/audit/, in auditd's log format, rotated and digested by
// witnessfs.FileSet as the pcap witness's files are (its comment says why
// the first files are kept past Limits.Files). Each event is one write(2),
// no user-space buffer, so a crash of the sidecar loses nothing already
// written.

// FileName returns the name of a session's n-th audit file (n from 1).
func FileName(n int) string { return fmt.Sprintf("audit-%06d.log", n) }

// Limits are the rotation settings, of the session files and of
// _audit/audit.log.
type Limits = witnessfs.Limits

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

// fileSet writes one session's events into its rotated files.
type fileSet struct {
	witnessfs.FileSet
	// rotated counts events past Limits.Files; failed those after a write
	// error, which ends storing for the session.
	rotated, failed counted
	line            []byte
}

// newFileSet returns the file set that create makes files for.
func newFileSet(limits Limits, create func(name string) (*os.File, error)) *fileSet {
	return &fileSet{FileSet: witnessfs.FileSet{Class: vocab.ClassAudit, Name: FileName, CountAttr: vocab.AttrRecords, Limits: limits, Create: create}}
}

// write stores the event's lines, rotating first when they would not fit.
func (s *fileSet) write(e *Event) {
	if s.Err() != nil {
		s.failed.add(e)
		return
	}
	s.line = e.AppendLog(s.line[:0])
	f, full := s.Next(int64(len(s.line)))
	if f == nil {
		if full {
			s.rotated.add(e)
		} else {
			s.failed.add(e)
		}
		return
	}
	if _, err := f.Write(s.line); err != nil {
		s.Fail(fmt.Errorf("audit: write %s: %w", f.Name, err))
		s.failed.add(e)
		return
	}
	f.Stored(int64(len(e.Records)), e.Time)
}
