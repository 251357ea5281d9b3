package recorder

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"golang.org/x/sys/unix"
)

// A session's folders are made and opened relative to their parent's fd,
// never by path, and never through a symlink (safefs.MkdirBeneath,
// safefs.OpenDirBeneath): anyone who can write to the capture root could
// otherwise plant <root>/<run_id> as a symlink and have records land
// outside the root (where the startup recovery scan never looks). A run or
// session folder that exists as something other than a plain directory
// (a symlink, a file) is refused, never followed, with an error naming it
// that matches safefs.ErrUnsafeDir. The capture root itself is the
// operator's setting and is opened as configured.

// sessionDirs are the open directories of one session's record.
type sessionDirs struct {
	path      string   // <root>/<run_id>/<session_id>, for Dir and messages
	sessionID string   // the session folder's name in run
	run       *os.File // <root>/<run_id>; may have existed before
	session   *os.File // made by makeSessionDirs
	pty       *os.File // made by makeSessionDirs
	made      []string // what this session created, in creation order: "session", "pty", then file names

	// A new session's folder is made under a name of its own in the
	// sidecar's folder (<root>/_sidecar/starting/<startName>) and gets
	// its name in the run folder only once it holds the open record
	// (publish): a sidecar killed during a start leaves no session
	// folder without a record, which verify would call tampered and no
	// restart could recover. SweepStarts removes what a crash left there.
	starting  *os.File // <root>/_sidecar/starting, until published
	startName string
	published bool
}

// startingDir is the sidecar's folder of session starts not yet published.
const startingDir = "starting"

// makeSessionDirs creates the run folder if needed, then the session
// folder, under its starting name until publish, and its pty folder, and
// opens all three without following symlinks (safefs.ErrUnsafeDir). The
// session id must be unused in the run folder (ErrSessionExists; publish
// checks it again, atomically). On failure it removes what it made, so a refused
// session leaves no folder behind.
func makeSessionDirs(root, runID, sessionID string) (_ *sessionDirs, err error) {
	if err := os.MkdirAll(root, dirMode); err != nil {
		return nil, fmt.Errorf("recorder: create capture root: %w", err)
	}
	rootDir, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	defer rootDir.Close()
	d := &sessionDirs{path: filepath.Join(root, runID, sessionID), sessionID: sessionID}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.removeMade(), d.close())
		}
	}()
	if d.run, err = safefs.MkdirBeneath(rootDir, runID, dirMode, true); err != nil {
		return nil, fmt.Errorf("recorder: run folder %s: %w", runID, err)
	}
	if err := nameFree(d.run, sessionID); err != nil {
		return nil, fmt.Errorf("recorder: session %s/%s: %w", runID, sessionID, err)
	}
	if d.starting, err = openSidecarDir(root, startingDir); err != nil {
		return nil, err
	}
	if d.startName, err = newStartName(); err != nil {
		return nil, err
	}
	if d.session, err = safefs.MkdirBeneath(d.starting, d.startName, dirMode, false); err != nil {
		return nil, fmt.Errorf("recorder: session folder %s/%s (starting): %w", runID, sessionID, err)
	}
	d.made = append(d.made, "session")
	if d.pty, err = safefs.MkdirBeneath(d.session, ptyDirName, dirMode, false); err != nil {
		return nil, fmt.Errorf("recorder: pty folder: %w", err)
	}
	d.made = append(d.made, "pty")
	return d, nil
}

// nameFree reports ErrSessionExists when anything has name in run: a
// session id is used once, whatever took it.
func nameFree(run *os.File, name string) error {
	var st unix.Stat_t
	err := safefs.RetryEINTR(func() error { return unix.Fstatat(int(run.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	switch {
	case err == nil:
		return ErrSessionExists
	case errors.Is(err, unix.ENOENT):
		return nil
	}
	return &os.PathError{Op: "fstatat", Path: name, Err: err}
}

// newStartName is a starting folder's name: random, so concurrent starts
// (of one id too) never meet; which session it is, is in its open record.
func newStartName() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("recorder: name a starting session folder: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// publish gives the session folder, which now holds the open record, its
// name in the run folder: one rename, which never replaces (a concurrent
// start of the same id that published first wins; this one is then
// ErrSessionExists). The run folder is synced so the name outlives a host
// crash: a start the crash undid would be swept, its transcript with it.
func (d *sessionDirs) publish() error {
	err := safefs.RetryEINTR(func() error {
		return unix.Renameat2(int(d.starting.Fd()), d.startName, int(d.run.Fd()), d.sessionID, unix.RENAME_NOREPLACE)
	})
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// A file system without RENAME_NOREPLACE: a plain rename refuses
		// a file or a folder that holds anything, and nameFree refused
		// the rest when the start began.
		err = safefs.RetryEINTR(func() error {
			return unix.Renameat(int(d.starting.Fd()), d.startName, int(d.run.Fd()), d.sessionID)
		})
	}
	switch {
	case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("recorder: session %s: %w", d.path, ErrSessionExists)
	case err != nil:
		return fmt.Errorf("recorder: name the session folder %s: %w", d.path, err)
	}
	d.published = true
	if err := d.run.Sync(); err != nil {
		return fmt.Errorf("recorder: fsync the run folder of %s: %w", d.path, err)
	}
	return nil
}

// SweepStarts removes the session starts a crash cut before they were
// published (<root>/_sidecar/starting/*) and returns how many it removed;
// the server calls it at start, before any session starts. Nothing of
// such a start crossed the terminal: the shell starts only after its
// record is published.
func SweepStarts(root string) (int, error) {
	entries, err := os.ReadDir(filepath.Join(root, sidecarDir, startingDir))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("recorder: sweep the cut session starts: %w", err)
	}
	// Opened the safe way first: a starting folder that is a link is
	// refused, never swept through.
	dir, err := openSidecarDir(root, startingDir)
	if err != nil {
		return 0, err
	}
	dir.Close()
	var errs []error
	n := 0
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(root, sidecarDir, startingDir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("recorder: sweep the cut session starts: %w", err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// openSessionDirs opens the existing run, session and pty folders of a
// session below root as makeSessionDirs does, never through a symlink
// (safefs.ErrUnsafeDir), and creates nothing. The startup recovery reads
// and writes a session only through these fds, so a folder swapped for a
// link after the open is not followed.
func openSessionDirs(root, runID, sessionID string) (_ *sessionDirs, err error) {
	rootDir, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	defer rootDir.Close()
	d := &sessionDirs{path: filepath.Join(root, runID, sessionID), sessionID: sessionID}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.close())
		}
	}()
	if d.run, err = safefs.OpenDirBeneath(rootDir, runID); err != nil {
		return nil, fmt.Errorf("recorder: run folder %s: %w", runID, err)
	}
	if d.session, err = safefs.OpenDirBeneath(d.run, sessionID); err != nil {
		return nil, fmt.Errorf("recorder: session folder %s/%s: %w", runID, sessionID, err)
	}
	if d.pty, err = safefs.OpenDirBeneath(d.session, ptyDirName); err != nil {
		return nil, fmt.Errorf("recorder: pty folder of %s/%s: %w", runID, sessionID, err)
	}
	return d, nil
}

// openRoot opens the capture root, the operator's setting, as configured.
func openRoot(root string) (*os.File, error) {
	f, err := os.OpenFile(root, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("recorder: open capture root: %w", err)
	}
	return f, nil
}

// createFile creates a record file in the pty folder; it must not exist
// yet, and O_NOFOLLOW|O_EXCL refuse a planted symlink.
func (d *sessionDirs) createFile(name string) (*os.File, error) {
	var fd int
	err := safefs.RetryEINTR(func() (err error) {
		fd, err = unix.Openat(int(d.pty.Fd()), name,
			unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, fileMode)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("recorder: create %s: %w", name, err)
	}
	d.made = append(d.made, name)
	return os.NewFile(uintptr(fd), filepath.Join(d.path, ptyDirName, name)), nil
}

// createWhole creates name in the pty folder holding data (createWholeIn),
// and syncs the folder, so the name is durable once it returns.
func (d *sessionDirs) createWhole(name string, data []byte) error {
	if err := d.createWholeIn(d.pty, wholeFile{name, data}); err != nil {
		return err
	}
	return d.pty.Sync()
}

// wholeFile is a file createWholeIn makes: its name and all it holds.
type wholeFile struct {
	name string
	data []byte
}

// createWholeIn creates each file in dir, one of d's open folders, so
// that its name never holds less than all of its data, whatever moment a
// crash (a SIGKILL, a power loss) comes at: the data is written to an
// unnamed file (O_TMPFILE), made durable, and only then linked in under
// the name (never over an existing file, like createFile). A crash before
// a link leaves no file and no name: the kernel frees the unnamed file.
// The names are durable once the caller syncs dir (createWhole does; Close
// syncs the session's folders anyway, one sync for every name made in
// them). It is for a file whose mere
// name is a statement (the recovery file: a start that finds it recovers
// the session no more; the manifest: sha256sum checks what it lists),
// which a torn copy would turn into a false one. The files are made
// durable together (syncFiles: concurrent fsyncs share a journal commit)
// and named in order. Where the file system has no O_TMPFILE, or the link
// cannot be made (no /proc), each file not named yet is created under its
// name and written in one write (createNamedIn): a crash mid-write can
// then leave it short. A failed write removes what it made.
func (d *sessionDirs) createWholeIn(dir *os.File, files ...wholeFile) error {
	var unnamed []*os.File
	defer func() {
		for _, f := range unnamed {
			f.Close()
		}
	}()
	for _, w := range files {
		fd, err := safefs.RetryEINTR2(func() (int, error) {
			// No O_EXCL: that would forbid the link.
			return unix.Openat(int(dir.Fd()), ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, fileMode)
		})
		if err != nil {
			if len(unnamed) == 0 && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL)) {
				return d.createNamedIn(dir, files...)
			}
			return fmt.Errorf("recorder: create %s: %w", w.name, err)
		}
		f := os.NewFile(uintptr(fd), filepath.Join(dir.Name(), w.name))
		unnamed = append(unnamed, f)
		if _, err := f.Write(w.data); err != nil {
			return fmt.Errorf("recorder: write %s: %w", w.name, err)
		}
	}
	if err := syncFiles(unnamed); err != nil {
		return err
	}
	for i, f := range unnamed {
		name := files[i].name
		if wholeWritten != nil {
			wholeWritten(d.path, name)
		}
		err := safefs.RetryEINTR(func() error {
			return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), int(dir.Fd()), name, unix.AT_SYMLINK_FOLLOW)
		})
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EEXIST):
			return fmt.Errorf("recorder: create %s: %w", name, os.ErrExist)
		case !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES):
			return fmt.Errorf("recorder: link %s: %w", name, err)
		}
		// /proc is missing or refuses: the rest are written under their names.
		return d.createNamedIn(dir, files[i:]...)
	}
	return nil
}

// createNamedIn is createWholeIn where no unnamed file can be linked:
// each file is created in dir under its name (never over a file, never
// through a link) and its data written in one write and synced; a file
// that did not get its data whole is removed, and the files after it are
// not made.
func (d *sessionDirs) createNamedIn(dir *os.File, files ...wholeFile) error {
	for _, w := range files {
		if err := d.createNamedOne(dir, w); err != nil {
			return err
		}
	}
	return nil
}

func (d *sessionDirs) createNamedOne(dir *os.File, w wholeFile) error {
	f, err := safefs.CreateIn(dir, w.name, fileMode)
	if err != nil {
		return fmt.Errorf("recorder: create %s: %w", w.name, err)
	}
	_, err = f.Write(w.data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = dir.Sync()
	}
	if err != nil {
		// A file that did not get data whole (a full disk) goes again:
		// its name alone would make a statement. Only it: the folders
		// stay whoever made them.
		if uerr := unix.Unlinkat(int(dir.Fd()), w.name, 0); uerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the short file: %w", uerr))
		}
		return fmt.Errorf("recorder: write %s: %w", w.name, err)
	}
	return nil
}

// wholeWritten, when set (by tests), runs in createWhole once the data is
// durable in the unnamed file and before it gets its name: a crash there
// must leave nothing a start would take for the file.
var wholeWritten func(dir, name string)

// removeMade removes, newest first, what this session created: its files,
// its pty folder and its session folder. It is for a session that could not
// be created (a full disk): a folder without an open record would use the
// id up, verify as blank ids and fail recovery on every restart. The run
// folder stays: another session may be creating its folder in it.
func (d *sessionDirs) removeMade() error {
	var errs []error
	for i := len(d.made) - 1; i >= 0; i-- {
		var err error
		name := d.made[i]
		witnessDir, isWitness := strings.CutPrefix(name, witnessDirPrefix)
		switch {
		case isWitness:
			// A witness folder: empty, since a witness writes only once started.
			err = unix.Unlinkat(int(d.session.Fd()), witnessDir, unix.AT_REMOVEDIR)
		case name == "session" && d.published:
			err = unix.Unlinkat(int(d.run.Fd()), d.sessionID, unix.AT_REMOVEDIR)
		case name == "session":
			err = unix.Unlinkat(int(d.starting.Fd()), d.startName, unix.AT_REMOVEDIR)
		case name == "pty":
			err = unix.Unlinkat(int(d.session.Fd()), ptyDirName, unix.AT_REMOVEDIR)
		default:
			err = unix.Unlinkat(int(d.pty.Fd()), name, 0)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("recorder: remove the unfinished session folder: %w", err))
		}
	}
	d.made = nil
	return errors.Join(errs...)
}

// sync fsyncs the pty, session and run folders, so the entries made in
// them are durable and a closed session's id stays used after a host crash.
func (d *sessionDirs) sync() error {
	var errs []error
	for _, dir := range []*os.File{d.pty, d.session, d.run} {
		if err := dir.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("recorder: fsync dir: %w", err))
		}
	}
	return errors.Join(errs...)
}

// close releases whichever folder fds are open.
func (d *sessionDirs) close() error {
	var errs []error
	for _, dir := range []**os.File{&d.pty, &d.session, &d.run, &d.starting} {
		if *dir != nil {
			errs = append(errs, (*dir).Close())
			*dir = nil
		}
	}
	return errors.Join(errs...)
}
