package broker

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// withQuickAck makes the server acknowledge the client's segments at once
// instead of after Linux's delayed-ACK timer (about 40 ms).
//
// Why: node ssh2, the tool servers' client, leaves Nagle's algorithm on, so
// each small write it makes while an earlier one is unacknowledged waits for
// our ACK. Opening a PTY shell sends env, pty-req and shell as separate small
// writes, some needing no reply from us, so without this the next one waited
// for the delayed ACK: measured with bench/ (docs/BENCHMARKS.md,
// "TCP_QUICKACK"), the env+pty+shell phase took 52 ms, and 8 ms with it;
// ssh2's session open fell by the same 50 ms. Setting TCP_QUICKACK before each read
// sends an ACK that is pending right away and leaves delayed-ACK ("pingpong")
// mode; the kernel re-enters that mode on its own as soon as we reply, so
// the option is set again before every read rather than once. Its cost is
// one setsockopt per read, measured by BenchmarkQuickAckRead.
//
// Connections other than TCP are returned unchanged.
func withQuickAck(conn net.Conn) net.Conn {
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return conn
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return conn
	}
	return &quickAckConn{Conn: tcp, raw: raw}
}

// quickAckConn re-arms TCP_QUICKACK before every read. It embeds net.Conn,
// not *net.TCPConn, so that no promoted WriteTo can read around Read.
type quickAckConn struct {
	net.Conn
	raw syscall.RawConn
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	// An error (the socket closed under us) surfaces from the read itself.
	c.raw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
	})
	return c.Conn.Read(p)
}
