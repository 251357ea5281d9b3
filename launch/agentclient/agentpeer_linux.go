package agentclient

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/aptl/aptl-kali-capture/internal/peercred"
	"golang.org/x/sys/unix"
)

// checkPeer decides whether the process that answered at the agent socket
// may have the session's slave. An abstract socket name can be bound by
// any process in the network namespace, including an unprivileged session
// process that outlived its session, so the answer's credentials are
// checked: the agent's uid, and (unless allowed for development) that the
// peer is not in the sidecar's own PID namespace. SO_PEERCRED reports pid 0
// for a peer whose namespace this one cannot see (sibling containers); a
// peer in a child namespace (unshare) has a pid here, and its namespace
// link tells.
//
// It also turns off SO_PASSRIGHTS on the connection (Linux 6.16+): the
// kernel then refuses any fd the agent tries to send back, so none is ever
// closed here, where the last close of a lingering socket can block without
// bound. On older kernels the setsockopt fails and returned fds are closed
// as they arrive (refuseFiles).
func (a *Agent) checkPeer(c *net.UnixConn) error {
	cred, err := peercred.Of(c)
	if err != nil {
		return err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var passErr error
	if err := rc.Control(func(fd uintptr) {
		passErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSRIGHTS, 0)
	}); err != nil {
		return err
	}
	if passErr != nil && !errors.Is(passErr, unix.ENOPROTOOPT) {
		return os.NewSyscallError("setsockopt SO_PASSRIGHTS", passErr)
	}
	switch {
	case int(cred.Uid) != a.agentUID:
		return fmt.Errorf("%w: it runs as uid %d, the agent must run as uid %d", ErrAgentUntrusted, cred.Uid, a.agentUID)
	case cred.Pid != 0 && !a.samePIDNS && !inOtherPIDNamespace(int(cred.Pid)):
		return fmt.Errorf("%w: it runs in the sidecar's own PID namespace (pid %d); the agent runs in the workload's", ErrAgentUntrusted, cred.Pid)
	}
	return nil
}

// inOtherPIDNamespace reports whether process pid lives in a PID namespace
// other than this process's. It fails closed: a process that cannot be
// looked at (gone, or its pid reused by a process of ours) counts as ours.
func inOtherPIDNamespace(pid int) bool {
	own, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return false
	}
	theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return err == nil && theirs != own
}
