// Package recorder writes each session's transcript in util-linux script(1) form.
//
// Each session gets <root>/<run_id>/<session_id>/pty/ with a typescript in
// script --log-io form and a timing file in script's advanced multi-stream
// format, so `scriptreplay -T timing -B typescript --stream out|in` replays it.
package recorder

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

var (
	// ErrInvalidID is returned, wrapped with which id, when a run or session
	// id fails ValidID.
	ErrInvalidID = errors.New("recorder: invalid id")
	// ErrReservedRunID is returned when the run id is a name ReservedRunID
	// reports as reserved.
	ErrReservedRunID = errors.New("recorder: reserved run id")
	// ErrSessionExists is returned when the session directory already exists:
	// ids are single-use, across restarts.
	ErrSessionExists = errors.New("recorder: session directory already exists")
	// ErrClosed is returned by every write (Input, Output, Stderr, Resize,
	// Annotate, Event) after Close.
	ErrClosed = errors.New("recorder: session closed")

	// errHeaderName reports a header name outside [A-Z0-9_]{1,128}, which is
	// a programming error in the caller.
	errHeaderName = errors.New("recorder: invalid header name")
)

const (
	dirMode  = 0o700
	fileMode = 0o600

	ptyDirName     = vocab.PTYDir
	typescriptName = vocab.TypescriptFile
	timingName     = vocab.TimingFile
)

// ValidID reports whether s satisfies the lab's canonical id rule
// (vocab.ValidID, whose home it is: the examiner resolves ids by it too).
func ValidID(s string) bool { return vocab.ValidID(s) }

// ReservedRunID reports whether name is a top-level name the lab reserves
// (`_audit`, `_proc-acct`, `_sidecar`), which may never be a run id.
func ReservedRunID(name string) bool {
	switch name {
	case "_audit", "_proc-acct", vocab.SidecarDir:
		return true
	}
	return false
}

// Meta describes a session when its record is created.
type Meta struct {
	RunID, SessionID string
	Command          string    // exec command; "" for a shell
	Shell            string    // login shell path, for the SHELL header; may be ""
	Term             string    // "" when the session has no PTY
	TTY              string    // slave name, may be ""
	Rows, Cols       int       // 0 when no PTY
	Headers          []Header  // extra APTL_* provenance headers written after the standard ones
	Start            time.Time // wall clock of the header; zero means time.Now()
}

// Create makes <root>/<run_id>/<session_id>/pty/{typescript,timing,integrity.jsonl},
// writes the typescript header line and the timing H lines, and starts the
// integrity log with its open record; opts.Signer is required.
//
// Both ids are validated (ErrInvalidID), reserved run ids refused
// (ErrReservedRunID) and header names checked before anything touches the
// disk. The session folder must be new (ErrSessionExists); a run or session
// folder that is a symlink is refused (safefs.ErrUnsafeDir). When Create fails
// after making the session folder (a full disk), it removes it again: no
// folder is left without an open record.
func Create(root string, m Meta, opts Options) (*Session, error) {
	return create(root, m, opts, time.Now)
}

// create is Create with an injectable clock; now must return times carrying
// a monotonic reading in production (time.Now does).
func create(root string, m Meta, opts Options, now func() time.Time) (_ *Session, err error) {
	if err := checkMeta(m); err != nil {
		return nil, err
	}
	if opts.Signer == nil {
		return nil, errNoSigner
	}
	if err := checkDisk(opts.Disk); err != nil {
		return nil, err
	}
	dirs, err := makeSessionDirs(root, m.RunID, m.SessionID)
	if err != nil {
		return nil, err
	}
	s := &Session{dirs: dirs, now: now, start: now(), opts: opts, counted: map[string]int64{}, tty: m.TTY, runID: m.RunID}
	var fallback string
	if s.signer, s.key, fallback, s.keyFallback, err = sessionSigner(opts); err != nil {
		return nil, errors.Join(err, dirs.removeMade(), dirs.close())
	}
	defer func() {
		if err != nil {
			s.destroyKey()
			s.abandonShipping()
			s.unwatchDisk()
			s.releaseReserve()
			s.abortWitnesses()
			err = errors.Join(err, s.closeRecordFiles(), dirs.removeMade(), dirs.close())
		}
	}()
	if s.reserve, err = openReserve(root); err != nil {
		return nil, err
	}
	if err := s.openFiles(); err != nil {
		return nil, err
	}
	s.chain = integrity.NewWriter(s.log, m.RunID, m.SessionID, s.signer, now)
	wall := m.Start
	if wall.IsZero() {
		wall = s.start
	}
	if err := s.writeStart(m, wall); err != nil {
		return nil, err
	}
	// Nothing but the header is in the typescript yet: its running digest
	// is the header's.
	headerSum := hex.EncodeToString(s.ts.sum.Sum(nil))
	open := openAttrs(m, int(s.ts.size), headerSum, opts, s.signer, fallback)
	s.openWitnesses(open)
	// The witnesses' window opens just before the open record is written
	// and (Close) ends just before the close record: whoever sees the
	// open record knows the window is open.
	s.startWitnesses(open)
	if err := s.chain.Append(vocab.TypeOpen, withExactValues(open)); err != nil {
		return nil, err
	}
	if err := s.watchDisk(); err != nil {
		return nil, err
	}
	if err := s.openShipping(); err != nil {
		return nil, err
	}
	if err := dirs.publish(); err != nil {
		return nil, err
	}
	s.startShipping()
	return s, nil
}

// openFiles creates the three record files in the new pty folder.
func (s *Session) openFiles() error {
	ts, err := s.dirs.createFile(typescriptName)
	if err != nil {
		return err
	}
	s.ts = newDigestFile(ts)
	tm, err := s.dirs.createFile(timingName)
	if err != nil {
		return err
	}
	s.tm = newDigestFile(tm)
	if s.log, err = s.dirs.createFile(vocab.LogFile); err != nil {
		return err
	}
	holdLiveLock(s.log)
	return nil
}

// holdLiveLock takes the exclusive flock(2) on the log that tells a
// verifier, and a restarted sidecar's recovery, that the session is being
// recorded (evidence/live.go). The kernel releases it when the log is
// closed or the process dies, however it dies. It is best effort: a
// verifier's probe may hold a shared lock for an instant, so a few tries
// are made, and a file system without flock leaves the session without
// the signal (a verifier then reports it unfinalized rather than in
// progress); recording goes on either way.
func holdLiveLock(f *os.File) {
	for range 20 {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// checkMeta validates everything Create can reject without touching the disk.
func checkMeta(m Meta) error {
	if !ValidID(m.RunID) {
		return fmt.Errorf("recorder: run id %.64q: %w", m.RunID, ErrInvalidID)
	}
	if ReservedRunID(m.RunID) {
		return fmt.Errorf("recorder: run id %q: %w", m.RunID, ErrReservedRunID)
	}
	if !ValidID(m.SessionID) {
		return fmt.Errorf("recorder: session id %.64q: %w", m.SessionID, ErrInvalidID)
	}
	return checkHeaderNames(m.Headers)
}

// checkHeaderNames returns errHeaderName for the first name that scriptreplay
// could not read back as one token.
func checkHeaderNames(hs []Header) error {
	for _, h := range hs {
		if !scriptfmt.ValidHeaderName(h.Name) {
			return fmt.Errorf("recorder: header %.64q: %w", h.Name, errHeaderName)
		}
	}
	return nil
}
