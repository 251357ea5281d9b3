package relaywire

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/peercred"
	"golang.org/x/sys/unix"
)

// Conn is one connection of the protocol, on either side.
type Conn struct {
	c   *net.UnixConn
	buf []byte
}

// NewConn wraps an accepted or dialled SOCK_SEQPACKET connection and
// turns off SO_PASSRIGHTS on it, so the kernel refuses any descriptor the
// peer tries to send (older kernels lack the option: Read then refuses a
// frame that carries control data).
func NewConn(c *net.UnixConn) *Conn {
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSRIGHTS, 0) })
	}
	return &Conn{c: c, buf: make([]byte, MaxFrame+1)}
}

// Dial connects to the relay's socket within timeout.
func Dial(path string, timeout time.Duration) (*Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("unixpacket", path)
	if err != nil {
		return nil, err
	}
	return NewConn(c.(*net.UnixConn)), nil
}

// Unix is the underlying connection (deadlines, close).
func (c *Conn) Unix() *net.UnixConn { return c.c }

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// ErrClosed is the peer's orderly end of the connection.
var ErrClosed = errors.New("relay wire: peer closed the connection")

// Read reads one frame of a type in want. The frame's body is valid until
// the next Read. The caller bounds the wait with the read deadline.
func (c *Conn) Read(want ...Type) (Frame, error) {
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := c.c.ReadMsgUnix(c.buf, oob)
	switch {
	case errors.Is(err, io.EOF) || (err == nil && n == 0 && oobn == 0):
		return Frame{}, ErrClosed
	case err != nil:
		return Frame{}, fmt.Errorf("relay wire: read: %w", err)
	case oobn > 0 || flags&unix.MSG_CTRUNC != 0:
		closeRights(oob[:oobn])
		return Frame{}, protocolf("frame carries control data (descriptors are never sent)")
	case flags&unix.MSG_TRUNC != 0 || n > MaxFrame:
		return Frame{}, protocolf("frame larger than %d bytes", MaxFrame)
	}
	return Parse(c.buf[:n], want...)
}

// closeRights closes any descriptor that arrived, so none leaks.
func closeRights(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_RIGHTS {
			m.Data = m.Data[:len(m.Data)&^3]
			if fds, err := unix.ParseUnixRights(&m); err == nil {
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
		}
	}
}

// Write sends one frame before deadline.
func (c *Conn) Write(frame []byte, deadline time.Time) error {
	if len(frame) == 0 || len(frame) > MaxFrame {
		return fmt.Errorf("relay wire: frame of %d bytes, want 1 to %d", len(frame), MaxFrame)
	}
	if err := c.c.SetWriteDeadline(deadline); err != nil {
		return err
	}
	n, err := c.c.Write(frame)
	if err == nil && n != len(frame) {
		err = errors.New("short write")
	}
	if err != nil {
		return fmt.Errorf("relay wire: send %s: %w", Type(frame[0]), err)
	}
	return nil
}

// PeerCred returns the peer's credentials as the kernel recorded them at
// connect(2).
func (c *Conn) PeerCred() (*unix.Ucred, error) { return peercred.Of(c.c) }

// CheckPeer is both sides' policy: the peer runs as uid and gid, whose
// name (the sidecar, the relay) and setting the refusal names.
func CheckPeer(cred *unix.Ucred, who string, uid, gid int, setting string) error {
	if int64(cred.Uid) != int64(uid) || int64(cred.Gid) != int64(gid) {
		return fmt.Errorf("peer runs as uid %d gid %d; only %s's uid %d gid %d is accepted (%s)",
			cred.Uid, cred.Gid, who, uid, gid, setting)
	}
	return nil
}
