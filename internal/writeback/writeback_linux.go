package writeback

import (
	"os"

	"golang.org/x/sys/unix"
)

// Step is what Sync gives back at a time: the whole steps below the file's
// size. Advice over pages already given back costs little; over pages
// written last on another CPU it costs the kernel a drain of every CPU's
// page lists first (about 50 µs measured on the machine of
// docs/BENCHMARKS.md). In steps of a MiB that cost comes once per MiB a
// file grows, not at every fsync (strict mode fsyncs every chunk). The
// rest of the step, the file's end with it, stays cached, so the next
// append never reads a partial page back from disk first.
const Step = 1 << 20

// dropCached advises the kernel that the whole steps of f's first size
// bytes are not needed.
func dropCached(f *os.File, size int64) {
	whole := size &^ (Step - 1)
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
