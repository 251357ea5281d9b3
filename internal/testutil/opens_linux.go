package testutil

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WatchOpens watches the files at paths for opens from now on (an exec of
// a file opens it, so this counts which program a start executed); the
// returned function reports the opens of each path so far.
func WatchOpens(t testing.TB, paths ...string) func() map[string]int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	byWatch := map[int32]string{}
	for _, p := range paths {
		wd, err := unix.InotifyAddWatch(fd, p, unix.IN_OPEN)
		if err != nil {
			t.Fatal(err)
		}
		byWatch[int32(wd)] = p
	}
	counts := map[string]int{}
	return func() map[string]int {
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) {
				return counts
			}
			if err != nil {
				t.Fatal(err)
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				counts[byWatch[ev.Wd]]++
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}
