package login

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKeepInheritedFDsFromSessions (markInheritedCloseOnExec): a descriptor open across exec is marked
// close-on-exec and reported; one that already has the flag, and stdin,
// stdout and stderr, are left as they are.
func TestKeepInheritedFDsFromSessions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	open := func(flags int) int {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|flags, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	inherited, own := open(0), open(unix.O_CLOEXEC)
	std := make([]int, 3)
	for fd := range std {
		std[fd], _ = unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	}

	marked, err := markInheritedCloseOnExec()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(marked, inherited) || slices.Contains(marked, own) {
		t.Errorf("marked %v: want %d (open across exec) and not %d (close-on-exec already)", marked, inherited, own)
	}
	if !slices.IsSorted(marked) {
		t.Errorf("marked %v: not in order", marked)
	}
	if flags, err := unix.FcntlInt(uintptr(inherited), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("descriptor %d after the call: flags %#x, %v; want FD_CLOEXEC", inherited, flags, err)
	}
	for fd, before := range std {
		if after, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); after != before || slices.Contains(marked, fd) {
			t.Errorf("descriptor %d changed: flags %#x -> %#x (marked %v)", fd, before, after, marked)
		}
	}
	if again, err := markInheritedCloseOnExec(); err != nil || len(again) != 0 {
		t.Errorf("second call marked %v (%v); want nothing left to mark", again, err)
	}
}

// TestKeepInheritedFDsFromSessionsWithoutProc: where /proc/self/fd cannot
// be read, every descriptor above stderr is marked with close_range(2),
// and the log says they were not listed.
func TestKeepInheritedFDsFromSessionsWithoutProc(t *testing.T) {
	fd, err := unix.Open(filepath.Join(t.TempDir(), "secret"), unix.O_RDWR|unix.O_CREAT, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	saved := procSelfFD
	procSelfFD = filepath.Join(t.TempDir(), "no-proc")
	defer func() { procSelfFD = saved }()

	var logs bytes.Buffer
	if err := KeepInheritedFDsFromSessions(slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("descriptor %d after the call: flags %#x, %v; want FD_CLOEXEC", fd, flags, err)
	}
	if !strings.Contains(logs.String(), "without listing them") || !strings.Contains(logs.String(), "no-proc") {
		t.Errorf("the log does not say the descriptors were marked without a listing, and why:\n%s", logs.String())
	}
}
