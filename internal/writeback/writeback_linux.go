package writeback

import (
	"os"

	"golang.org/x/sys/unix"
)

// pageSize is the unit the page cache holds a file in.
var pageSize = int64(os.Getpagesize())

// dropCached advises the kernel that the whole pages of f's first size
// bytes are not needed. The partial page at size stays: dropping it would
// make the next append read it back from disk before writing into it.
func dropCached(f *os.File, size int64) {
	whole := size &^ (pageSize - 1)
	if whole == 0 {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// Advice only: fadvise fails for a descriptor that is not a file
	// (EBADF, ESPIPE) or a bad range (EINVAL), none of which this is; a
	// failure leaves the pages cached, which is correct, only larger.
	rc.Control(func(fd uintptr) {
		unix.Fadvise(int(fd), 0, whole, unix.FADV_DONTNEED)
	})
}
