package audit

import (
	"fmt"
	"os"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/witness/witnessfs"
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
	// diskLow is the window of events not stored since the capture
	// volume went low, until one is stored again; lowWindows those that
	// ended so, not yet gap records (witness.emitPending).
	diskLow    window
	lowWindows []window
	// runBudget and volumeBudget count the events past the witnesses'
	// budgets across sessions (witnessbudget).
	runBudget, volumeBudget window
}

// window is a count of events not stored, and when the first and the
// last of them happened.
type window struct {
	counted
	first, last time.Time
}

func (w *window) add(e *Event) {
	if w.events == 0 {
		w.first = e.Time
	}
	w.counted.add(e)
	w.last = e.Time
}

// gap is w's gap record.
func (w window) gap(reason string) gapRecord {
	return gapRecord{reason: reason, count: uint64(w.events), at: w.first, last: w.last}
}

// maxLowWindows bounds the low windows held between two checkpoints
// (about a second): past it, the last one takes in the next.
const maxLowWindows = 16

// endLowWindow ends the window of events not stored on a low volume, if
// one is open: an event is stored again, or the session closes.
func (s *fileSet) endLowWindow() {
	if s.diskLow.events == 0 {
		return
	}
	if n := len(s.lowWindows); n == maxLowWindows {
		last := &s.lowWindows[n-1]
		last.events += s.diskLow.events
		last.records += s.diskLow.records
		last.last = s.diskLow.last
	} else {
		s.lowWindows = append(s.lowWindows, s.diskLow)
	}
	s.diskLow = window{}
}

// newFileSet returns the file set that create makes files for.
func newFileSet(limits Limits, create func(name string) (*os.File, error), gate recorder.WitnessGate) *fileSet {
	return &fileSet{FileSet: witnessfs.FileSet{Class: vocab.ClassAudit, Name: FileName, CountAttr: vocab.AttrRecords, Limits: limits, Create: create, Gate: gate}}
}

// write stores the event's lines, rotating first when they would not fit.
func (s *fileSet) write(e *Event) {
	if s.Err() != nil {
		s.failed.add(e)
		return
	}
	s.line = e.AppendLog(s.line[:0])
	f, why := s.Next(int64(len(s.line)))
	if f == nil {
		switch why {
		case witnessfs.Full:
			s.rotated.add(e)
		case witnessfs.DiskLow:
			s.diskLow.add(e)
		case witnessfs.RunBudget:
			s.runBudget.add(e)
		case witnessfs.VolumeBudget:
			s.volumeBudget.add(e)
		default:
			s.failed.add(e)
		}
		return
	}
	s.endLowWindow()
	if _, err := f.Write(s.line); err != nil {
		s.Fail(fmt.Errorf("audit: write %s: %w", f.Name, err))
		s.failed.add(e)
		return
	}
	f.Stored(int64(len(e.Records)), e.Time)
}
