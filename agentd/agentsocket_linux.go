package agentd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
)

// Listen listens on socket (a path, or "@name" for an abstract socket).
// A path socket belongs to the sidecar's credentials, peerUID and peerGID,
// with mode 0600: connect(2) needs write permission on the file (unix(7)),
// so only that uid (and root) can reach it, and a sidecar that is not root
// can use it. A stale socket file left by a dead agent is replaced; anything
// else at the path is an error. An abstract socket has no file: peerUID and
// peerGID are then only checked per connection (agentadmit_linux.go).
func Listen(socket string, peerUID, peerGID int) (*net.UnixListener, error) {
	if err := agentwire.CheckSocket(socket); err != nil {
		return nil, err
	}
	if socket[0] == '@' {
		ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: socket, Net: "unixpacket"})
		if err != nil {
			return nil, fmt.Errorf("agentd: listen %s: %w", socket, err)
		}
		return ln, nil
	}
	if err := removeStaleSocket(socket); err != nil {
		return nil, err
	}
	return listenPath(socket, peerUID, peerGID)
}

// listenPath binds the socket file in a fresh 0700 directory beside its
// final path, gives it to the peer there and renames it into place. Nobody
// but the agent's user can enter that directory, so between bind and
// rename no one can connect to the file while it has bind's mode, nor swap
// it for a symlink that chown or chmod would follow; the rename makes it
// appear at its path already owned by the peer, 0600. (Setting the umask
// instead would not cover the chown, and the umask is shared by every
// thread of the process.)
func listenPath(socket string, peerUID, peerGID int) (*net.UnixListener, error) {
	private, err := os.MkdirTemp(filepath.Dir(socket), ".agent")
	if err != nil {
		return nil, fmt.Errorf("agentd: private directory for %s: %w", socket, err)
	}
	defer os.RemoveAll(private)
	staged := filepath.Join(private, "s")
	if err := agentwire.CheckSocket(staged); err != nil {
		return nil, fmt.Errorf("agentd: %s: its staging path %s: %w (use a shorter path)", socket, staged, err)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: staged, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("agentd: listen %s: %w", socket, err)
	}
	// Close must not unlink the staged name, which the rename retires; the
	// file at socket stays after Close and the next start replaces it as
	// stale (removeStaleSocket).
	ln.SetUnlinkOnClose(false)
	if err := givePeer(staged, peerUID, peerGID); err != nil {
		ln.Close()
		return nil, fmt.Errorf("agentd: %s: %w", socket, err)
	}
	if err := os.Rename(staged, socket); err != nil {
		ln.Close()
		return nil, fmt.Errorf("agentd: move socket into place: %w", err)
	}
	return ln, nil
}

// givePeer makes the socket file the peer's, mode 0600. An agent that is
// not root can only keep its own ids (tests, development).
func givePeer(path string, uid, gid int) error {
	if uid != os.Geteuid() || gid != os.Getegid() {
		if err := os.Lchown(path, uid, gid); err != nil {
			return fmt.Errorf("give the socket to the sidecar's uid %d gid %d (-peer-uid, -peer-gid): %w", uid, gid, err)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("chmod socket: %w", err)
	}
	return nil
}

// removeStaleSocket removes a socket file nobody listens on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agentd: %w", err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("agentd: %s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("agentd: another agent listens on %s", path)
	}
	return os.Remove(path)
}
