// Package witnessfs is what the kernel witnesses (witness/pcap,
// witness/audit) share: the source that opens each session's witness from
// the class's engine (source_linux.go), and the rotated, digested set of a
// session's witness files (fileset.go), whose files a witness makes in its
// folder of a session without following links (safefs.CreateIn).
package witnessfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/wholewrite"
	"github.com/aptl/aptl-kali-capture/internal/writeback"
	"github.com/aptl/aptl-kali-capture/recorder"
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
	// Buffer is the user-space buffer of the current file: whole items
	// are held until they reach it and then written, between items, and
	// at each Sync; 0: every Write is one write(2), so a crash of the
	// sidecar loses nothing already written.
	Buffer int
	Limits Limits
	Create func(name string) (*os.File, error) // makes a new file 0600 in the witness's folder
	// Gate, when set, is asked before an item is stored: the capture
	// volume's state and the witnesses' budgets (recorder/disk.go).
	Gate recorder.WitnessGate

	made     int
	cur      *File
	finished []FileRecord // not yet taken
	err      error
	lost     int64 // items taken whole but lost when their write failed
}

// File is the file being written. It is an io.Writer; what it takes is
// in size and count (which rotation goes by), but its record and the
// checkpoints vouch only for what write(2) stored in the file (stored,
// sum, storedCount): bytes held in the user-space buffer are not counted
// before they are written, so no claim runs past the file.
type File struct {
	Name string
	set  *FileSet
	f    *os.File
	// held are the bytes of whole items taken but not yet written (with
	// FileSet.Buffer), then those of the item being written; heldEnd is
	// where the whole items end. Without a buffer every Write is one
	// write(2), whole or not at all, and nothing is held.
	held    []byte
	heldEnd int
	sum     hash.Hash // of the bytes stored in f
	stored  int64     // bytes write(2) stored in f
	size    int64     // bytes taken, held ones included
	count   int64     // items taken, held ones included
	// storedCount items are whole in f, the last of them of time storedLast.
	storedCount       int64
	first, storedLast time.Time
	last              time.Time // of the last item taken
}

// Refusal says why Next gave no file: why an item is not stored.
type Refusal int

const (
	Admitted Refusal = iota
	// Full: Limits.Files are made.
	Full
	// Failed: a write error ended storing for the session (Err).
	Failed
	// DiskLow: the gate says the capture volume is low or critical.
	DiskLow
	// RunBudget, VolumeBudget: the gate says the witnesses' budget of the
	// session's run, or of the volume, is spent.
	RunBudget
	VolumeBudget
)

// Next returns the file that need more bytes go into: the current one, or,
// when they would take the current one past Limits.RotateBytes and it
// holds something already, a new one. It returns nil and why when they
// are not to be stored: Full when Limits.Files are made, Failed after a
// write error (Err says which), or what the Gate refused. A witness that
// buffers in its own encoder writes everything to the File before it
// calls Next, so the size is exact.
func (s *FileSet) Next(need int64) (*File, Refusal) {
	if s.err != nil {
		return nil, Failed
	}
	if s.cur != nil && s.cur.count > 0 && s.cur.size+need > s.Limits.RotateBytes {
		// Finishing writes what the file holds; when that fails, storing
		// has ended, and the items lost with it are the witness's to
		// count: no next file is opened.
		if s.Finish(); s.err != nil {
			return nil, Failed
		}
	}
	if s.cur == nil && s.made >= s.Limits.Files {
		return nil, Full
	}
	if s.Gate != nil {
		switch s.Gate.Admit(need) {
		case recorder.StoreDiskLow:
			return nil, DiskLow
		case recorder.StoreRunBudget:
			return nil, RunBudget
		case recorder.StoreVolumeBudget:
			return nil, VolumeBudget
		}
	}
	if s.cur == nil {
		s.made++
		name := s.Name(s.made)
		f, err := s.Create(name)
		if err != nil {
			s.err = fmt.Errorf("%s: create %s: %w", s.Class, name, err)
			return nil, Failed
		}
		s.cur = &File{Name: name, set: s, f: f, sum: sha256.New()}
	}
	return s.cur, Admitted
}

// Write writes p to the file: with a buffer it is held, and the whole
// items held before it are written first once they fill the buffer;
// without one it is written at once, whole or not at all.
func (f *File) Write(p []byte) (int, error) {
	if f.set.Buffer <= 0 {
		if err := f.store(p); err != nil {
			return 0, err
		}
		f.size += int64(len(p))
		return len(p), nil
	}
	if len(f.held) == f.heldEnd && f.heldEnd >= f.set.Buffer {
		if err := f.flush(); err != nil {
			return 0, err
		}
	}
	f.held = append(f.held, p...)
	f.size += int64(len(p))
	return len(p), nil
}

// Stored counts n items written whole, the last of them of time t.
func (f *File) Stored(n int64, t time.Time) {
	if f.count == 0 {
		f.first = t
	}
	f.count += n
	f.last = t
	if f.set.Buffer <= 0 {
		f.storedCount, f.storedLast = f.count, t
		return
	}
	f.heldEnd = len(f.held)
}

// store writes p whole or not at all (package wholewrite) and counts it.
func (f *File) store(p []byte) error {
	torn, err := wholewrite.Write(f.f, p)
	if err == nil {
		torn = len(p)
	}
	f.sum.Write(p[:torn])
	f.stored += int64(torn)
	if err != nil {
		return fmt.Errorf("%s: write %s: %w", f.set.Class, f.Name, err)
	}
	return nil
}

// flush writes the whole items held; the item being written, if any,
// stays held. When the write fails they are lost (the cut leaves the file
// at the last whole item): FileSet.Lost counts them for the witness's gap.
func (f *File) flush() error {
	if f.heldEnd == 0 {
		return nil
	}
	err := f.store(f.held[:f.heldEnd])
	if err != nil {
		f.set.lost += f.count - f.storedCount
		f.count = f.storedCount
	} else {
		f.storedCount, f.storedLast = f.count, f.last
	}
	f.held = f.held[:copy(f.held, f.held[f.heldEnd:])]
	f.heldEnd = 0
	return err
}

// Fail ends storing for the session with err; the witness wraps err with
// what it was writing.
func (s *FileSet) Fail(err error) { s.err = err }

// Err is the error that ended storing, if one did.
func (s *FileSet) Err() error { return s.err }

// Held is how many items taken (File.Stored) are in the buffer, not yet
// written.
func (f *File) Held() int64 { return f.count - f.storedCount }

// Lost is how many items were taken (File.Stored) but lost with the
// buffer whose write failed: the witness counts them in its gap of
// items not stored.
func (s *FileSet) Lost() int64 { return s.lost }

// Made is how many files were made.
func (s *FileSet) Made() int { return s.made }

// Sync flushes the current file and makes it durable; it returns the
// file's name, size and running digest for the checkpoint, or "" when no
// file is open.
func (s *FileSet) Sync() (name string, size int64, sum string) {
	f := s.cur
	if f == nil {
		return "", 0, ""
	}
	if s.err == nil {
		err := f.flush()
		if err == nil {
			err = writeback.Sync(f.f)
		}
		s.err = err
	}
	return f.Name, f.stored, hex.EncodeToString(f.sum.Sum(nil))
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
		errs = append(errs, f.flush(), writeback.Sync(f.f))
	} else {
		s.lost += f.count - f.storedCount // held when storing ended
	}
	errs = append(errs, f.f.Close())
	rec := FileRecord{Name: f.Name, CountAttr: s.CountAttr, Count: f.storedCount, Size: f.stored, SHA256: hex.EncodeToString(f.sum.Sum(nil))}
	if f.storedCount > 0 {
		rec.First, rec.Last = f.first, f.storedLast
	}
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
