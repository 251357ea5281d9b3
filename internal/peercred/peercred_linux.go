// Package peercred is who is at the other end of a Unix socket, as the
// kernel recorded it at connect(2) (SO_PEERCRED, unix(7)): what both of the
// project's socket protocols (the launch agent's, internal/agentwire; the
// witness relay's, internal/relaywire) decide their peers by, never
// anything a peer says.
package peercred

import (
	"fmt"
	"math"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// MaxID is the largest uid or gid a peer can have: (uid_t)-1 is no id.
const MaxID = math.MaxUint32 - 1

// Of returns the connecting process's credentials as the kernel recorded
// them at connect(2).
func Of(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, os.NewSyscallError("getsockopt SO_PEERCRED", cerr)
	}
	return cred, nil
}

// CheckIDs checks a configured peer uid and gid.
func CheckIDs(uid, gid int) error {
	if uid < 0 || uid > MaxID {
		return fmt.Errorf("uid %d is not from 0 to %d", uid, MaxID)
	}
	if gid < 0 || gid > MaxID {
		return fmt.Errorf("gid %d is not from 0 to %d", gid, MaxID)
	}
	return nil
}
