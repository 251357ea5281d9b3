package safefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Folders and files a writer makes beneath a folder it holds open: made
// and opened relative to the parent's fd, never by path, and never
// through a symbolic link, so that anyone who can write to the parent
// cannot plant a link there and have records land elsewhere. The parent
// itself is the caller's (the capture root is the operator's setting).

// ErrUnsafeDir is matched (errors.Is) by the error of a folder that exists
// as something other than a plain directory (a symbolic link, a file): it
// is refused, never followed.
var ErrUnsafeDir = errors.New("safefs: not a plain directory")

// MkdirBeneath makes name (one component) in parent with mode (an
// existing one is accepted only when mayExist) and opens it as a directory
// without following a link (OpenDirBeneath). The open after the mkdir
// also catches a folder swapped for a link between the two calls.
func MkdirBeneath(parent *os.File, name string, mode uint32, mayExist bool) (*os.File, error) {
	err := RetryEINTR(func() error { return unix.Mkdirat(int(parent.Fd()), name, mode) })
	if err != nil && !(mayExist && errors.Is(err, unix.EEXIST)) {
		return nil, &os.PathError{Op: "mkdirat", Path: name, Err: err}
	}
	return OpenDirBeneath(parent, name)
}

// OpenDirBeneath opens the directory name (one component) of parent with
// openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS. Kernels before 5.6 lack
// openat2 (ENOSYS), and older container seccomp profiles deny it (EPERM);
// name is a single component, so openat with O_NOFOLLOW|O_DIRECTORY then
// refuses the same things. A link or anything but a directory is
// ErrUnsafeDir.
func OpenDirBeneath(parent *os.File, name string) (*os.File, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := RetryEINTR2(func() (int, error) {
		fd, err := unix.Openat2(int(parent.Fd()), name, &unix.OpenHow{
			Flags: flags, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
		})
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			fd, err = unix.Openat(int(parent.Fd()), name, flags, 0)
		}
		return fd, err
	})
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("%s is a symlink or not a directory: %w", name, ErrUnsafeDir)
	case err != nil:
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// CreateIn makes the file name (one component) in dir with mode, for
// writing; it must not exist, and no link is followed (O_EXCL|O_NOFOLLOW
// refuse a planted one). The file is named dir/name.
func CreateIn(dir *os.File, name string, mode uint32) (*os.File, error) {
	fd, err := RetryEINTR2(func() (int, error) {
		return unix.Openat(int(dir.Fd()), name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	})
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
}
