package agentd

// This file runs in aptl-launch-agent: who may connect to the agent at all.
// The abstract socket is reachable from every process in the network
// namespace (the workload's, a sidecar's non-root processes, any container
// joined to it), so the agent trusts a peer only for the credentials the
// kernel recorded at connect(2), never for anything the peer says.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/peercred"
	"github.com/aptl/aptl-kali-capture/internal/ratelog"
)

// admit decides, in the accept loop and before anything is allocated for
// the connection, whether its peer is the sidecar. A refused peer costs a
// getsockopt and a close: it gets no reply, no goroutine, no buffer, and
// its fd is closed at once, so a flood of refused peers holds nothing past
// its accept and cannot fill the session slots. The refusal is logged,
// rate-limited (newRefusalLog).
func (s *Server) admit(c *net.UnixConn, id uint64) (*unix.Ucred, bool) {
	cred, err := peercred.Of(c)
	if err == nil {
		err = s.checkPeer(cred)
	}
	if err == nil {
		return cred, true
	}
	// Logged before the close: once the peer sees its connection end, the
	// refusal is in the log (TestAgentRefusesWrongPeerCredentials reads it
	// right after; closing first made it fail now and then in CI).
	if cred == nil {
		s.refusals.Note("connection refused", "conn", id, "reason", err.Error())
	} else {
		s.refusals.Note("connection refused", "conn", id, "reason", err.Error(),
			"peer_pid", cred.Pid, "peer_uid", cred.Uid, "peer_gid", cred.Gid)
	}
	c.Close()
	return nil, false
}

// Limits of the agent's refusal log: a flood of refused peers (tens of
// thousands a second) must not turn into as many log writes, which would
// cost the agent more than the refusals themselves.
const (
	refusalLogBurst  = 20          // refusals logged in full per window
	refusalLogWindow = time.Second // after which the count of the rest is logged
)

// newRefusalLog logs refused peers one by one up to the burst, then as a
// count per window, so every refusal is in the log as a line or a count.
func newRefusalLog(log *slog.Logger) *ratelog.Log {
	return ratelog.New(log, slog.LevelWarn, "connection refusals not logged one by one", refusalLogBurst, refusalLogWindow)
}

// checkPeer is the peer policy: the sidecar's uid and gid, and (unless
// the development mode allows its own PID namespace) a peer outside the
// agent's PID namespace.
func (s *Server) checkPeer(cred *unix.Ucred) error {
	if int64(cred.Uid) != int64(s.cfg.PeerUID) || int64(cred.Gid) != int64(s.cfg.PeerGID) {
		return fmt.Errorf("peer runs as uid %d gid %d; the agent accepts only the sidecar's uid %d gid %d (-peer-uid, -peer-gid)",
			cred.Uid, cred.Gid, s.cfg.PeerUID, s.cfg.PeerGID)
	}
	return mayAcceptPeer(cred.Pid, s.cfg.InsecureAllowSamePIDNamespace)
}

// mayAcceptPeer is the namespace part of the policy. The kernel reports
// pid 0 for a peer that is not visible in the agent's PID namespace
// (unix(7), SO_PEERCRED; pid_vnr of a task outside the namespace), which
// the sidecar in its own container is, and every workload process is not.
func mayAcceptPeer(pid int32, insecureSameNS bool) error {
	if pid == 0 || insecureSameNS {
		return nil
	}
	return errors.New("peer is inside the agent's own PID namespace (a workload process, not the sidecar)")
}

// checkPeerIDs checks the configured sidecar credentials.
func checkPeerIDs(uid, gid int) error {
	if err := peercred.CheckIDs(uid, gid); err != nil {
		return fmt.Errorf("agentd: agent: peer %w", err)
	}
	return nil
}
