// Command wireclient is a hand-written client of the launch agent's wire
// protocol (internal/agentwire/wire_linux.go), for tests that connect to the agent as a
// process that is not the sidecar: another uid, or a workload process. It
// speaks the protocol from its documentation, with system calls only, so it
// shares no code with the adapter it impersonates.
//
//	wireclient spawn SOCKET USER   ask for a session; print what came back
//	wireclient flood SOCKET HOLD   connect as fast as it can, holding up to
//	                               HOLD connections, until stdin closes
//	                               (at most maxFlood); print the counts
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"golang.org/x/sys/unix"
)

// maxFlood bounds a flood whose test never closed stdin.
const maxFlood = 30 * time.Second

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: wireclient spawn SOCKET USER | flood SOCKET HOLD")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "spawn":
		err = spawn(os.Args[2], os.Args[3])
	case "flood":
		err = flood(os.Args[2], os.Args[3])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wireclient:", err)
		os.Exit(2)
	}
}

// dial connects a blocking SOCK_SEQPACKET socket to the agent; connect
// waits at most timeout while the agent's accept queue is full.
func dial(socket string, timeout time.Duration) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	if err == nil {
		err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}
	if err == nil {
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: socket}) // "@name" is abstract
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// spawn asks for a pipes session running `echo UNRECORDED` and prints one
// line: "started", "error CODE", or "closed ERR" (no reply).
func spawn(socket, user string) error {
	fd, err := dial(socket, 5*time.Second)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer unix.Close(fd)
	var pipes [3][2]int
	for i := range pipes {
		if err := unix.Pipe2(pipes[i][:], unix.O_CLOEXEC); err != nil {
			return fmt.Errorf("pipe: %w", err)
		}
	}
	// The child's ends: stdin's read end, stdout's and stderr's write ends.
	fds := []int{pipes[0][0], pipes[1][1], pipes[2][1]}
	body := u32(nil, 2) // mode: pipes
	body = str(body, user)
	body = str(body, "")
	body = str(body, "echo UNRECORDED")
	body = u32(body, 0) // no env
	frame := header(1, 3, body)
	if err := unix.Sendmsg(fd, frame, unix.UnixRights(fds...), nil, 0); err != nil {
		fmt.Println("closed", err)
		return nil
	}
	buf := make([]byte, 16<<10)
	n, _, _, _, err := unix.Recvmsg(fd, buf, nil, 0)
	switch {
	case err != nil:
		fmt.Println("closed", err)
	case n == 0:
		fmt.Println("closed EOF")
	case n >= 8 && buf[2] == 17:
		fmt.Println("started")
	case n >= 12 && buf[2] == 19:
		l := int(binary.BigEndian.Uint32(buf[8:12]))
		fmt.Println("error", string(buf[12:min(12+l, n)]))
	default:
		fmt.Printf("reply type %d\n", buf[2])
	}
	return nil
}

// flood connects as fast as it can and keeps the newest hold connections
// open (closing the oldest), so the agent sees many peers at once, until
// stdin reaches EOF. It prints "flooding" once the first hold connections
// are made, and "connects N failures M" at the end.
func flood(socket, holdArg string) error {
	hold, err := strconv.Atoi(holdArg)
	if err != nil || hold < 1 || hold > 512 {
		return fmt.Errorf("HOLD %q is not from 1 to 512", holdArg)
	}
	var stop atomic.Bool
	go func() {
		b := make([]byte, 1)
		for {
			if _, err := os.Stdin.Read(b); err != nil {
				stop.Store(true)
				return
			}
		}
	}()
	ring := make([]int, hold)
	for i := range ring {
		ring[i] = -1
	}
	var connects, failures int
	deadline := time.Now().Add(maxFlood)
	for i := 0; !stop.Load() && time.Now().Before(deadline); i = (i + 1) % hold {
		if ring[i] >= 0 {
			unix.Close(ring[i])
			ring[i] = -1
		}
		fd, err := dial(socket, 100*time.Millisecond)
		if err != nil {
			// EAGAIN: the agent's queue stayed full; EINTR: the runtime's
			// preemption signal. Both are part of flooding.
			if !errors.Is(err, unix.EAGAIN) && !safefs.Interrupted(err) {
				return fmt.Errorf("connect: %w", err)
			}
			failures++
			continue
		}
		ring[i] = fd
		connects++
		if connects == hold {
			fmt.Println("flooding")
		}
	}
	fmt.Printf("connects %d failures %d\n", connects, failures)
	return nil
}

func header(typ byte, nfds byte, body []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, 1) // version
	b = append(b, typ, nfds)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	return append(b, body...)
}

func u32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }

func str(b []byte, s string) []byte { return append(u32(b, uint32(len(s))), s...) }
