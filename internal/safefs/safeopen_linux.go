package safefs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// openRegular walks parts below dir with openat and O_NOFOLLOW, so no
// component can be swapped for a link between a check and the open. The
// file is looked at (fstatat, no follow) before it is opened, so a device
// is never opened at all, and opened with O_NONBLOCK, so a named pipe
// swapped in after that look cannot block; fstat after the open decides.
func openRegular(dir string, parts []string) (*os.File, int64, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return walkRegular(dfd, dir, parts)
}

// openRegularIn is openRegular relative to an open directory, which is
// not looked up again: it cannot be swapped between two opens.
func openRegularIn(dir *os.File, name string) (*os.File, int64, error) {
	dfd, err := unix.FcntlInt(dir.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, 0, &os.PathError{Op: "dup", Path: dir.Name(), Err: err}
	}
	return walkRegular(dfd, dir.Name(), []string{name})
}

// walkRegular does openRegular's walk from dfd (named dir in errors),
// which it closes.
func walkRegular(dfd int, dir string, parts []string) (*os.File, int64, error) {
	defer func() { unix.Close(dfd) }()
	for i, p := range parts {
		path := filepath.Join(dir, strings.Join(parts[:i+1], "/"))
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, p, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, 0, &os.PathError{Op: "lstat", Path: path, Err: err}
		}
		last := i == len(parts)-1
		if kind, ok := checkKind(st.Mode, last); !ok {
			return nil, 0, &NotRegularError{Path: path, Kind: kind}
		}
		flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NOCTTY
		if last {
			flags |= unix.O_NONBLOCK
		} else {
			flags |= unix.O_DIRECTORY
		}
		fd, err := unix.Openat(dfd, p, flags, 0)
		if errors.Is(err, unix.ELOOP) {
			return nil, 0, &NotRegularError{Path: path, Kind: kindSymlink}
		}
		if err != nil {
			return nil, 0, &os.PathError{Op: "open", Path: path, Err: err}
		}
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, 0, &os.PathError{Op: "fstat", Path: path, Err: err}
		}
		if kind, ok := checkKind(st.Mode, last); !ok {
			unix.Close(fd)
			return nil, 0, &NotRegularError{Path: path, Kind: kind}
		}
		if !last {
			unix.Close(dfd)
			dfd = fd
			continue
		}
		// Reads of a regular file do not block; clearing the flag keeps
		// the descriptor what os.File expects of a file.
		if err := unix.SetNonblock(fd, false); err != nil {
			unix.Close(fd)
			return nil, 0, &os.PathError{Op: "fcntl", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), st.Size, nil
	}
	return nil, 0, &os.PathError{Op: "open", Path: dir, Err: os.ErrInvalid}
}

// checkKind accepts a directory, or for the last component a regular
// file, and otherwise names what the mode is.
func checkKind(mode uint32, last bool) (string, bool) {
	var m fs.FileMode
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		if last {
			return "", true
		}
	case unix.S_IFDIR:
		if !last {
			return "", true
		}
		m = fs.ModeDir
	case unix.S_IFLNK:
		m = fs.ModeSymlink
	case unix.S_IFIFO:
		m = fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m = fs.ModeSocket
	case unix.S_IFCHR:
		m = fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m = fs.ModeDevice
	}
	if m == 0 && !last {
		return "not a directory", false
	}
	return DescribeMode(m), false
}
