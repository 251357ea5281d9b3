package broker

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// nagleWrites is how many times the client below makes two small writes
// in a row with Nagle's algorithm on, as node ssh2 does for env, pty-req and
// shell.
const nagleWrites = 5

// TestQuickAckSendsNoDelayedACK counts the kernel's delayed ACKs (TcpExt
// DelayedACKs, which counts the delayed-ACK timer firing) in a network
// namespace of the test's own, so no other socket counts. A client with
// Nagle on writes two small messages nagleWrites times; the server reads
// them without replying. On a plain connection the second write waits for
// the first one's ACK, which only the timer sends; through withQuickAck the
// read re-arms TCP_QUICKACK and the ACK leaves at once. The plain run is
// the control: it shows that this kernel delays ACKs, so the wrapped run's
// zero means something.
func TestQuickAckSendsNoDelayedACK(t *testing.T) {
	enterOwnNetns(t)
	plain := delayedACKsDuring(t, func(c net.Conn) net.Conn { return c })
	quick := delayedACKsDuring(t, withQuickAck)
	t.Logf("delayed ACKs over %d pairs of small writes: plain %d, with TCP_QUICKACK %d", nagleWrites, plain, quick)
	if plain < 1 {
		t.Fatalf("control: a plain connection sent %d delayed ACKs; this kernel does not delay ACKs, so the test shows nothing", plain)
	}
	if quick != 0 {
		t.Errorf("with TCP_QUICKACK re-armed before each read the kernel still sent %d delayed ACKs", quick)
	}
}

// enterOwnNetns locks the test's goroutine to its thread and moves that
// thread into a new network namespace with loopback up; the thread is
// discarded when the test ends (no UnlockOSThread).
func enterOwnNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace of its own (CLONE_NEWNET)")
	}
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Skipf("network namespaces are not permitted here: unshare: %v", err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatalf("bringing lo up: %v", err)
	}
}

// delayedACKsDuring runs the client's writes against a server connection
// wrapped by wrap, and returns how many delayed ACKs the namespace sent.
// Every socket is made on this (locked) thread, so in its namespace.
func delayedACKsDuring(t *testing.T, wrap func(net.Conn) net.Conn) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	client.(*net.TCPConn).SetNoDelay(false) // Nagle on, as node ssh2
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	server := wrap(accepted)
	defer server.Close()

	// The client acknowledges at once too, so that every delayed ACK
	// counted is the server's.
	client = withQuickAck(client)
	before := delayedACKs(t)
	done := make(chan error, 1)
	go func() {
		// Read one byte at a time, as the SSH transport reads packet by
		// packet, and reply after each pair: replying within the ACK
		// timeout keeps the connection in the kernel's interactive
		// ("pingpong") mode, where ACKs are delayed, as in an SSH session.
		buf := make([]byte, 1)
		for range nagleWrites {
			for range 2 {
				if _, err := io.ReadFull(server, buf); err != nil {
					done <- err
					return
				}
			}
			if _, err := server.Write([]byte("r")); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	reply := make([]byte, 1)
	for range nagleWrites {
		// The second byte waits, under Nagle, for the first one's ACK.
		for _, b := range []byte("ab") {
			if _, err := client.Write([]byte{b}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := io.ReadFull(client, reply); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return delayedACKs(t) - before
}

// delayedACKs reads TcpExt DelayedACKs of the calling thread's network
// namespace (/proc/thread-self: /proc/self/net is the main thread's).
func delayedACKs(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/thread-self/net/netstat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		names := strings.Fields(sc.Text())
		if len(names) == 0 || names[0] != "TcpExt:" || !sc.Scan() {
			continue
		}
		values := strings.Fields(sc.Text())
		for i, n := range names {
			if n == "DelayedACKs" && i < len(values) {
				v, err := strconv.Atoi(values[i])
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	t.Fatal(fmt.Errorf("no TcpExt DelayedACKs in /proc/thread-self/net/netstat"))
	return 0
}

// BenchmarkQuickAckRead is the cost withQuickAck adds to a read: the read of
// one byte already queued on a loopback socket, with and without the
// setsockopt before it.
func BenchmarkQuickAckRead(b *testing.B) {
	for _, tc := range []struct {
		name string
		wrap func(net.Conn) net.Conn
	}{{"plain", func(c net.Conn) net.Conn { return c }}, {"quickack", withQuickAck}} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			accepted, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			server := tc.wrap(accepted)
			defer server.Close()
			chunk := make([]byte, 4096)
			buf := make([]byte, 1)
			queued := 0
			for b.Loop() {
				if queued == 0 {
					b.StopTimer()
					if _, err := client.Write(chunk); err != nil {
						b.Fatal(err)
					}
					queued = len(chunk)
					b.StartTimer()
				}
				if _, err := io.ReadFull(server, buf); err != nil {
					b.Fatal(err)
				}
				queued--
			}
		})
	}
}
