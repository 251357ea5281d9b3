package login

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// KeepInheritedFDsFromSessions marks close-on-exec every descriptor above
// stderr that this process was started with open across exec, and logs
// their numbers. Call it before the first session starts, in every program
// that starts sessions (the sidecar's serve, the agent).
//
// Why: a session's shell is a child of this process, and a child gets every
// descriptor its parent holds without FD_CLOEXEC. Go opens its own with the
// flag, but whatever started this process may have left some open without
// it (a supervisor's pipe, a file a wrapper script opened, a socket), and
// each would reach every session: a shell running as an unprivileged user
// could read a root-only file through it. sshd closes all of them at start
// for the same reason (closefrom in its main). They are marked, not
// closed, so a flag naming one (--authorized-keys /dev/fd/63, from a
// shell's process substitution) still reads it. Where /proc/self/fd cannot
// be read, close_range(2) marks them all without naming them; only where
// neither works does the program refuse to start.
//
// Descriptors opened after this stay out of sessions by the same flag:
// Go's os and net packages set it, as does every raw open, socket and
// memfd call in this repository (and the agent receives descriptors with
// MSG_CMSG_CLOEXEC).
//
// WARNING: without this, `ls -l /proc/$$/fd` in a session lists what the
// server's starter left open. Re-verify with:
//
//	go test -run TestSessionsGetNoDescriptorOfTheStarter ./tests/
func KeepInheritedFDsFromSessions(log *slog.Logger) error {
	fds, err := markInheritedCloseOnExec()
	if err != nil {
		// Without /proc nothing lists them, and close_range(2) (Linux 5.11)
		// marks every descriptor above stderr at once: Go's own have the
		// flag already.
		if cerr := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); cerr != nil {
			return fmt.Errorf("%w; close_range: %w", err, cerr)
		}
		log.Info("descriptors inherited from the starter are kept from sessions (close-on-exec), all above stderr without listing them", "reason", err.Error())
		return nil
	}
	if len(fds) > 0 {
		log.Info("descriptors inherited from the starter are kept from sessions (close-on-exec)", "fds", fds)
	}
	return nil
}

// procSelfFD lists this process's descriptors; a test points it elsewhere
// to take the close_range path.
var procSelfFD = "/proc/self/fd"

// markInheritedCloseOnExec does it and returns the descriptors it marked,
// lowest first.
func markInheritedCloseOnExec() ([]int, error) {
	dir, err := os.Open(procSelfFD)
	if err != nil {
		return nil, fmt.Errorf("list inherited descriptors: %w", err)
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list inherited descriptors: %w", err)
	}
	var marked []int
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd <= 2 {
			continue
		}
		// The listing's own descriptor has the flag (Go's), and one
		// listed then closed (EBADF) can reach no child either.
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil {
			return marked, fmt.Errorf("mark inherited descriptor %d close-on-exec: %w", fd, err)
		}
		marked = append(marked, fd)
	}
	slices.Sort(marked)
	return marked, nil
}
