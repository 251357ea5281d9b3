// Package witnessfs is what the kernel witnesses (witness/pcap,
// witness/audit) share: the source that opens each session's witness from
// the class's engine (source_linux.go), the rotated, digested set of a
// session's witness files (fileset.go), and the making of a witness's
// files in its folder of a session.
package witnessfs

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CreateIn makes name in dir, 0600; it must not exist, and no symlink is
// followed (a planted one is refused).
func CreateIn(dir *os.File, name string) (*os.File, error) {
	for {
		fd, err := unix.Openat(int(dir.Fd()), name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "openat", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
	}
}
