package pcap_test

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/witness/pcap"
)

// TestPcapCapturesOnlyWhileASessionIsOpen: the engine in a namespace of
// its own, traffic on loopback. With no session open the kernel gives the
// socket no packet (PACKET_STATISTICS), before the first session and
// after the last; a session captures every packet of its window, including
// those sent just before it closes; a second session opened while the
// first is open keeps capture on until both are gone; and a session after
// an idle spell captures again.
func TestPcapCapturesOnlyWhileASessionIsOpen(t *testing.T) {
	requireNetns(t)
	ns := fmt.Sprintf("apci%d", os.Getpid()%100000)
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var eng *pcap.Engine
	testutil.InNetns(t, ns, func() (err error) {
		eng, err = pcap.StartEngine(benchListenPort, log)
		return err
	})
	defer eng.Close()
	src := pcap.NewSource(pcap.Limits{RotateBytes: pcap.DefaultRotateMB << 20, Files: pcap.DefaultFiles}, log, "")
	src.SetEngine(eng, "")

	// The receiver: once it has read a datagram, the kernel has passed it
	// by every packet socket on its way out and in, so the counts below
	// are final when send returns.
	var rx *net.UDPConn
	testutil.InNetns(t, ns, func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		return err
	})
	defer rx.Close()
	const perPhase = 20
	send := func(phase string) {
		t.Helper()
		testutil.InNetns(t, ns, func() error {
			c, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
			if err != nil {
				return err
			}
			defer c.Close()
			for i := range perPhase {
				if _, err := fmt.Fprintf(c, "mark-%s-%02d", phase, i); err != nil {
					return err
				}
			}
			return nil
		})
		// The deadline only keeps a lost datagram from hanging the test.
		rx.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 100)
		for i := range perPhase {
			if _, _, err := rx.ReadFrom(buf); err != nil {
				t.Fatalf("phase %s: datagram %d not received: %v", phase, i, err)
			}
		}
	}
	// sent sends a phase's traffic and returns how many packets the
	// kernel gave the socket meanwhile.
	sent := func(phase string) uint64 {
		t.Helper()
		before := eng.Received()
		send(phase)
		return eng.Received() - before
	}
	idle := func(phase string) {
		t.Helper()
		if n := sent(phase); n != 0 {
			t.Errorf("no session open (%s): the kernel gave the capture socket %d packets, want none", phase, n)
		}
	}
	capturing := func(phase string) {
		t.Helper()
		if n := sent(phase); n < perPhase {
			t.Errorf("a session open (%s): the kernel gave the capture socket %d packets, want at least %d", phase, n, perPhase)
		}
	}
	type sess struct {
		w   recorder.Witness
		dir string
	}
	open := func() sess {
		t.Helper()
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, vocab.PcapDir), 0o700); err != nil {
			t.Fatal(err)
		}
		w, attrs := src.Open(recorder.WitnessOpen{Mkdir: func() (*os.File, error) { return os.Open(filepath.Join(dir, vocab.PcapDir)) }, Notify: func() {}})
		if attrs[vocab.AttrPcap] != vocab.PcapOn {
			t.Fatalf("pcap source did not open: %v", attrs)
		}
		if attrs := w.Start(); attrs != nil {
			t.Fatalf("the session's window did not open: %v", attrs)
		}
		return sess{w, dir}
	}
	nop := func(string, map[string]string) error { return nil }
	end := func(s sess, who string, in, out []string) {
		t.Helper()
		attrs, err := s.w.Close(nop)
		if err != nil {
			t.Fatalf("close session %s: %v", who, err)
		}
		if d := attrs[vocab.AttrPcapKernelDrops]; d != "0" {
			t.Errorf("session %s: %s kernel drops", who, d)
		}
		c := readCapture(t, s.dir)
		for _, phase := range in {
			for i := range perPhase {
				// Once: the filter leaves out loopback's outgoing copy.
				if m := fmt.Sprintf("mark-%s-%02d", phase, i); len(c.payloads[m]) != 1 {
					t.Errorf("session %s: %s captured %d times, want once", who, m, len(c.payloads[m]))
				}
			}
		}
		for _, phase := range out {
			for i := range perPhase {
				if m := fmt.Sprintf("mark-%s-%02d", phase, i); c.has(m) {
					t.Errorf("session %s: %s, sent outside its window, was captured", who, m)
				}
			}
		}
	}

	idle("before")
	a := open()
	capturing("a")
	b := open()
	capturing("ab")
	// "ab" was sent just before a closes: the close waits for the ring
	// before capture can stop.
	end(a, "a", []string{"a", "ab"}, []string{"before"})
	capturing("b")
	end(b, "b", []string{"ab", "b"}, []string{"before", "a"})
	idle("after")
	c := open()
	capturing("c")
	end(c, "c", []string{"c"}, []string{"after", "b"})
	idle("after-c")
}
