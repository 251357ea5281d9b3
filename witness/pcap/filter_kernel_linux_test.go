package pcap

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestFilterVerdictsInTheKernel: the crafted packets of TestFilterVerdicts,
// sent on the loopback of a namespace the test makes, reach a packet
// socket with the capture filter as runFilter says: once each when kept
// (the outgoing copy dropped), never when not. So the model the pure
// test relies on is the kernel's.
func TestFilterVerdictsInTheKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running the filter in the kernel needs root (a network namespace of its own, CAP_NET_RAW)")
	}
	ns := fmt.Sprintf("apcf%d", os.Getpid()%100000)
	testutil.AddNetns(t, ns)
	prog, err := listenerFilter(testListenPort)
	if err != nil {
		t.Fatal(err)
	}
	testutil.InNetns(t, ns, func() error {
		// One CPU: the loopback hands each frame to the CPU that sent it,
		// so a frame and the marker sent after it arrive in that order.
		// (The thread is never reused: RunInNetns keeps it locked.)
		var cpus, one unix.CPUSet
		if err := unix.SchedGetaffinity(0, &cpus); err != nil {
			return err
		}
		for i := 0; i < len(cpus)*64; i++ {
			if cpus.IsSet(i) {
				one.Set(i)
				break
			}
		}
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			return err
		}
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		rx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(rx)
		if err := (&Engine{fd: rx}).attachFilter(prog); err != nil {
			return err
		}
		// The timeout only keeps a lost marker from hanging the test.
		if err := unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 10}); err != nil {
			return err
		}
		if err := unix.Bind(rx, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: lo.Index}); err != nil {
			return err
		}
		tx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(tx)
		buf := make([]byte, 4096)
		for i, c := range filterCases() {
			// The marker: a frame of the local experimental EtherType, which
			// the filter keeps.
			marker := ethernet(0x88b5, []byte(fmt.Sprintf("marker %d", i)))
			for _, f := range [][]byte{c.p.frame, marker} {
				to := &unix.SockaddrLinklayer{Ifindex: lo.Index, Protocol: htons(uint16(c.p.proto))}
				if err := unix.Sendto(tx, f, 0, to); err != nil {
					return fmt.Errorf("%s: send: %w", c.name, err)
				}
			}
			copies := 0
			for {
				n, _, err := unix.Recvfrom(rx, buf, 0)
				if err != nil {
					return fmt.Errorf("%s: the marker sent after it did not arrive: %w", c.name, err)
				}
				if bytes.Equal(buf[:n], marker) {
					break
				}
				if bytes.Equal(buf[:n], c.p.frame) {
					copies++
				}
			}
			want := 0
			if c.accept {
				want = 1
			}
			if copies != want {
				t.Errorf("%s: the kernel's filter kept %d copies, want %d", c.name, copies, want)
			}
		}
		return nil
	})
}
