// Package safefs opens a regular file beneath a folder without following
// links, and holds the no-follow rules of the project in one place.
//
// Every file of a capture folder is hostile when it is read back: the
// verifier, the exports, the startup recovery and the tee reader open
// session files only through OpenRegular, which follows no symbolic link
// below the directory it is given and opens only regular files, so that
// a link to /dev/zero or a named pipe cannot make a reader hash forever
// or block. The Linux implementation (safeopen_linux.go) does this with
// openat(O_NOFOLLOW|O_NONBLOCK) and fstat; other systems get a portable
// lstat-then-compare fallback (safeopen_other.go). It imports nothing of
// the project outside internal/, so every layer can use it.
package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// ErrNotRegular is matched (errors.Is) by the error of a session file that
// is a symbolic link, a named pipe, a device or anything but a regular file.
var ErrNotRegular = errors.New("not a regular file")

// NotRegularError names the path and what was found there.
type NotRegularError struct {
	Path string
	Kind string // "a symbolic link", "a named pipe", ...
}

func (e *NotRegularError) Error() string {
	if e.Kind == kindSymlink {
		return fmt.Sprintf("%s is a symbolic link, which is not followed in a session folder", e.Path)
	}
	return fmt.Sprintf("%s is %s, not a regular file; it is not read", e.Path, e.Kind)
}

func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

const kindSymlink = "a symbolic link"

// DescribeMode names a file type, as NotRegularError and the callers that
// refuse a folder entry say what they found ("a named pipe").
func DescribeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return kindSymlink
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	}
	return "of an unknown type"
}

// OpenRegular opens dir/rel for reading. dir itself is the caller's
// choice and is followed; every component of rel (a slash-separated path
// such as "pty/typescript") must be a real directory or, last, a regular
// file. It returns the file and its size at open: readers bound what they
// read by it, so a file that grows meanwhile is not chased.
func OpenRegular(dir, rel string) (*os.File, int64, error) {
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, 0, fmt.Errorf("safefs: open %s: bad relative path %q", dir, rel)
		}
	}
	// The errors of openRegular (*NotRegularError, *os.PathError) name
	// the path and what failed.
	return openRegular(dir, parts)
}

// OpenRegularIn is OpenRegular for the file name (one component) in the
// open directory dir, read relative to it (openat on Linux): a recovery
// that opened a session's pty folder once reads the files of that folder,
// even if its path is swapped for a link meanwhile. dir stays open.
func OpenRegularIn(dir *os.File, name string) (*os.File, int64, error) {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return nil, 0, fmt.Errorf("safefs: open in %s: bad file name %q", dir.Name(), name)
	}
	return openRegularIn(dir, name)
}
