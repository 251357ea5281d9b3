package recorder

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// A session's record must stay finalizable on a full disk: the close
// record, the last checkpoint, the typescript's done line and the
// timing's closing lines need room when the write that failed took the
// last of it. So each session holds, from Create to Close, a reserve:
// an unnamed file (O_TMPFILE) of reserveBytes, allocated (fallocate) in
// the sidecar's own folder of the capture volume (<root>/_sidecar/
// reserve/, never in the session's folder, where an examiner would take
// it for an anomaly). When a write of the session fails, the reserve is
// given back and at once taken again as preallocated tails of the three
// record files (fallocate KEEP_SIZE beyond their ends), which the closing
// writes then fill: the space goes to this session's closing records,
// not to whichever writer on the volume asks first (only the instant
// between the two calls is open to one). Close trims what the tails did
// not use. An unnamed file is freed by the kernel when its descriptor
// closes, a crash included; where O_TMPFILE is not supported, the file
// is named and unlinked at once, and a start removes any a crash left
// between the two (SweepReserves).
const (
	// The tails' sizes bound what the closing writes may take. Measured
	// (TestClosingRecordsFitTheReserve): a terminal session's close and
	// last checkpoint are about 2 KiB of log; each witness adds a file
	// record and a few gap records of about 400 bytes each; the done line
	// and the timing's closing lines with the close headers are under
	// 1 KiB. The log's tail also takes records a failed write held back
	// (integrity.Writer), normally one.
	logTail    = 32 << 10
	timingTail = 4 << 10
	tsTail     = 4 << 10
	// reserveBytes is the tails and a margin for the file system's own
	// rounding: each tail ends in a partial block (4 KiB on ext4, a page
	// on tmpfs), and ext4 may need an extent block per file.
	reserveBytes = 64 << 10
	reserveDir   = "reserve"
)

// sidecarDir is the sidecar's own folder in the capture root, a reserved
// run id (ReservedRunID).
const sidecarDir = vocab.SidecarDir

// openReserve allocates a session's reserve on root's volume. A volume
// without room for it refuses the session: its record could not be
// finalized.
func openReserve(root string) (*os.File, error) {
	dir, err := openReserveDir(root)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	f, err := createUnnamed(dir)
	if err != nil {
		return nil, fmt.Errorf("recorder: create the closing records' reserve: %w", err)
	}
	if err := safefs.RetryEINTR(func() error { return unix.Fallocate(int(f.Fd()), 0, 0, reserveBytes) }); err != nil {
		f.Close()
		return nil, fmt.Errorf("recorder: reserve %d bytes for the closing records: %w", reserveBytes, err)
	}
	return f, nil
}

// openReserveDir opens <root>/_sidecar/reserve, making it if needed,
// never through a link.
func openReserveDir(root string) (*os.File, error) { return openSidecarDir(root, reserveDir) }

// openSidecarDir opens <root>/_sidecar/<name>, the sidecar's own folders
// on the capture volume, making them if needed, never through a link.
func openSidecarDir(root, name string) (*os.File, error) {
	rootDir, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	defer rootDir.Close()
	side, err := safefs.MkdirBeneath(rootDir, sidecarDir, dirMode, true)
	if err != nil {
		return nil, fmt.Errorf("recorder: %s folder: %w", sidecarDir, err)
	}
	defer side.Close()
	dir, err := safefs.MkdirBeneath(side, name, dirMode, true)
	if err != nil {
		return nil, fmt.Errorf("recorder: %s/%s folder: %w", sidecarDir, name, err)
	}
	return dir, nil
}

// createUnnamed creates a file in dir that has no name: O_TMPFILE, or a
// named one unlinked at once where the file system lacks it.
func createUnnamed(dir *os.File) (*os.File, error) {
	var fd int
	err := safefs.RetryEINTR(func() (err error) {
		fd, err = unix.Openat(int(dir.Fd()), ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, fileMode)
		return err
	})
	if err == nil {
		return os.NewFile(uintptr(fd), "reserve"), nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return nil, err
	}
	name := fmt.Sprintf("r-%d-%p", os.Getpid(), &fd)
	err = safefs.RetryEINTR(func() (err error) {
		fd, err = unix.Openat(int(dir.Fd()), name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, fileMode)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "reserve"), nil
}

// SweepReserves removes the named reserves a crash left behind (only
// where O_TMPFILE is missing can there be any); the server calls it at
// start. A reserve still open elsewhere keeps its space until closed.
func SweepReserves(root string) error {
	entries, err := os.ReadDir(filepath.Join(root, sidecarDir, reserveDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recorder: sweep the reserves: %w", err)
	}
	dir, err := openReserveDir(root)
	if err != nil {
		return err
	}
	defer dir.Close()
	var errs []error
	for _, e := range entries {
		if e.Type().IsRegular() {
			if err := unix.Unlinkat(int(dir.Fd()), e.Name(), 0); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("recorder: sweep the reserves: %s: %w", e.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// recordTails are the record files and the tail each gets from the reserve.
func (s *Session) recordTails() []struct {
	f *os.File
	n int64
} {
	if s.log == nil || s.tm == nil || s.ts == nil {
		return nil // Create failed before they were all made
	}
	return []struct {
		f *os.File
		n int64
	}{{s.log, logTail}, {s.tm.File, timingTail}, {s.ts.File, tsTail}}
}

// drawOnReserve gives the reserve back and takes its space again as the
// record files' tails; it reports whether it did (once per session).
// Callers hold mu.
func (s *Session) drawOnReserve() bool {
	if s.reserve == nil {
		return false
	}
	s.reserve.Close()
	s.reserve = nil
	s.tailed = true
	for _, t := range s.recordTails() {
		if fi, err := t.f.Stat(); err == nil {
			// Best effort: a tail not taken leaves the closing write to
			// whatever room there is.
			safefs.RetryEINTR(func() error { return unix.Fallocate(int(t.f.Fd()), unix.FALLOC_FL_KEEP_SIZE, fi.Size(), t.n) })
		}
	}
	return true
}

// withReserve runs write, and once more after drawing on the reserve when
// it failed and the reserve was still held. write must be whole or
// nothing (package wholewrite), so the second try repeats nothing.
func (s *Session) withReserve(write func() error) error {
	err := write()
	if err != nil && s.drawOnReserve() {
		err = write()
	}
	return err
}

// releaseReserve frees the reserve, or trims the tails the closing writes
// did not fill: a punched hole frees them on tmpfs, a truncation to the
// same size on ext4 (each ignores the other's way). Trimming is best
// effort: what stays is at most the tails, freed with the files.
func (s *Session) releaseReserve() {
	if s.reserve != nil {
		s.reserve.Close()
		s.reserve = nil
	}
	if !s.tailed {
		return
	}
	for _, t := range s.recordTails() {
		if fi, err := t.f.Stat(); err == nil {
			unix.Fallocate(int(t.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, fi.Size(), t.n)
			t.f.Truncate(fi.Size())
		}
	}
}
