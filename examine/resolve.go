package examine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// MaxCandidates bounds the sessions an ambiguous SESSION id lists.
const MaxCandidates = 10

// ErrNoSession matches (errors.Is) what ResolveSession returns for an id
// that names no session under the root.
var ErrNoSession = errors.New("no such session")

// ErrNotAnID is what ResolveSession returns for an operand that is neither
// an existing path nor shaped as a session id: a path the examiner typed
// wrong, which verify reports as the path it is.
var ErrNotAnID = errors.New("neither a path nor a session id")

type notAnID struct{ msg string }

func (e *notAnID) Error() string        { return e.msg }
func (e *notAnID) Is(target error) bool { return target == ErrNotAnID }

// noSession is an id that names nothing; its message says where it was
// looked for.
type noSession struct{ msg string }

func (e *noSession) Error() string        { return e.msg }
func (e *noSession) Is(target error) bool { return target == ErrNoSession }

// AmbiguousError is a SESSION id that more than one run of the root holds.
type AmbiguousError struct {
	Session, Root string
	// Candidates are the first MaxCandidates as RUN/SESSION, in run
	// order; More counts the rest.
	Candidates []string
	More       int
}

func (e *AmbiguousError) Error() string {
	more := ""
	if e.More > 0 {
		more = fmt.Sprintf(" and %d more", e.More)
	}
	return fmt.Sprintf("session %q is in more than one run under %s: %s%s; give RUN/SESSION", e.Session, e.Root,
		strings.Join(e.Candidates, ", "), more)
}

// ResolveSession returns the session folder arg names: arg itself when it
// exists (a path wins over an id), else the session RUN/SESSION, or
// SESSION alone when exactly one run of the capture root root
// (<root>/<run>/<session>, as serve writes it) holds it. Both ids must
// pass vocab.ValidID, so a typed id cannot climb out of the root (no "..",
// no separator, no leading dot) before it is joined to it. The run and
// session folders an id lands on must be real folders: a symbolic link in
// a capture root is not followed, as List does not follow one.
//
// An id that names nothing wraps ErrNoSession; a SESSION in several runs is
// an *AmbiguousError.
func ResolveSession(root, arg string) (string, error) {
	if _, err := os.Lstat(arg); !errors.Is(err, fs.ErrNotExist) {
		// There (or there but unreadable: the command that opens it says
		// why, naming the path the user gave).
		return arg, nil
	}
	run, session, two := strings.Cut(arg, "/")
	switch {
	case two && vocab.ValidID(run) && vocab.ValidID(session):
		dir := filepath.Join(root, run, session)
		if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
			return "", &noSession{fmt.Sprintf("%q: no such file or folder, and no session %s under %s", arg, arg, root)}
		}
		return realSession(root, run, session)
	case !two && vocab.ValidID(arg):
		return findSession(root, arg)
	}
	return "", &notAnID{fmt.Sprintf("%q: no such file or folder, and not a session id (RUN/SESSION or SESSION: letters, digits, _, and . or - after the first)", arg)}
}

// findSession is the one run of root that holds session.
func findSession(root, session string) (string, error) {
	runs, err := listFolder(root)
	if err != nil {
		return "", &noSession{fmt.Sprintf("%q: no such file or folder, and the capture root where an id is looked for cannot be read: %v", session, err)}
	}
	var found []string
	amb := &AmbiguousError{Session: session, Root: root}
	for _, run := range runs.names {
		if run == vocab.SidecarDir || !vocab.ValidID(run) {
			continue // not a run any session can be recorded under
		}
		if _, err := os.Lstat(filepath.Join(root, run, session)); err != nil {
			continue
		}
		if found = append(found, run); len(amb.Candidates) < MaxCandidates {
			amb.Candidates = append(amb.Candidates, run+"/"+session)
		} else {
			amb.More++
		}
	}
	switch len(found) {
	case 0:
		return "", &noSession{fmt.Sprintf("%q: no such file or folder, and no run under %s holds a session %s", session, root, session)}
	case 1:
		return realSession(root, found[0], session)
	}
	return "", amb
}

// realSession is <root>/<run>/<session>, refused when the run or the
// session is a symbolic link or not a folder.
func realSession(root, run, session string) (string, error) {
	for _, dir := range []string{filepath.Join(root, run), filepath.Join(root, run, session)} {
		if err := checkRealDir(dir); err != nil {
			return "", err
		}
	}
	return filepath.Join(root, run, session), nil
}
