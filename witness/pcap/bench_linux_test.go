package pcap_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// BenchmarkCaptureVsTcpdump captures the same generated UDP traffic with
// the engine (through the session path: Source, tap, pcapng writer,
// checkpoints) and with `tcpdump -i any -U -w`, alternating within one run.
// Topology: namespace "s" (capture side, 10.231.77.1) and namespace "p"
// (sender, 10.231.77.2), joined by one veth pair; the sender is this test
// binary re-executed in "p" (bench_sender_linux_test.go).
func BenchmarkCaptureVsTcpdump(b *testing.B) {
	requireBenchNetns(b)
	if _, err := exec.LookPath("tcpdump"); err != nil {
		b.Skip("the capture benchmark needs tcpdump")
	}
	env := newBenchLab(b)
	for _, sz := range []struct {
		size, count int
	}{{64, 300_000}, {1400, 100_000}} {
		b.Run(fmt.Sprintf("%dB", sz.size), func(b *testing.B) {
			var eng, tcp roundResult
			for i := 0; i < b.N; i++ {
				// Alternate, so a busy neighbour on the shared machine
				// weighs on both sides alike.
				for r := 0; r < benchRounds; r++ {
					eng.add(env.engineRound(b, sz.size, sz.count))
					tcp.add(env.tcpdumpRound(b, sz.size, sz.count))
				}
			}
			eng.report(b, "engine")
			tcp.report(b, "tcpdump")
			b.ReportMetric(eng.pps()/tcp.pps(), "pps_ratio")
			b.ReportMetric(eng.cpuPerPacket()/tcp.cpuPerPacket(), "cpu_ratio")
		})
	}
}

// benchRounds is how many times each side captures per iteration.
const benchRounds = 2

const (
	benchCaptureAddr = "10.231.77.1"
	benchSenderAddr  = "10.231.77.2"
	benchPort        = "9"
	// benchListenPort is the port the engine's filter leaves out, as the
	// sidecar's SSH port; tcpdump gets the same exclusion ("not port 22").
	benchListenPort = 22
)

// roundResult sums what the rounds of one side measured.
type roundResult struct {
	sent, captured, drops int64
	sendTime, cpu         time.Duration
}

func (r *roundResult) add(o roundResult) {
	r.sent += o.sent
	r.captured += o.captured
	r.drops += o.drops
	r.sendTime += o.sendTime
	r.cpu += o.cpu
}

// pps is packets captured per second of sending.
func (r roundResult) pps() float64 { return float64(r.captured) / r.sendTime.Seconds() }

func (r roundResult) cpuPerPacket() float64 {
	return float64(r.cpu.Nanoseconds()) / float64(max(r.captured, 1))
}

func (r roundResult) report(b *testing.B, side string) {
	b.ReportMetric(r.pps(), side+"_pps")
	b.ReportMetric(float64(r.sent)/r.sendTime.Seconds(), side+"_sent_pps")
	b.ReportMetric(float64(r.drops), side+"_drops")
	b.ReportMetric(float64(r.sent-r.captured), side+"_missing")
	b.ReportMetric(r.cpuPerPacket(), side+"_cpu_ns/pkt")
}

// benchLab is the benchmark's two namespaces.
type benchLab struct {
	side, peer string
	sink       *net.UDPConn // receives the datagrams so no ICMP answers them
}

func requireBenchNetns(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the capture benchmark needs root (ip netns, veth pairs, CAP_NET_RAW)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		b.Skip("the capture benchmark needs ip (Debian iproute2)")
	}
}

func newBenchLab(b *testing.B) *benchLab {
	p := fmt.Sprintf("apb%d", os.Getpid()%100000)
	l := &benchLab{side: p + "s", peer: p + "p"}
	for _, ns := range []string{l.side, l.peer} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			b.Skipf("network namespaces are not permitted here: ip netns add: %v: %s", err, out)
		}
		b.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		benchRun(b, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	benchRun(b, "ip", "link", "add", p+"v", "netns", l.side, "type", "veth", "peer", "name", p+"vp", "netns", l.peer)
	benchRun(b, "ip", "-n", l.side, "addr", "add", benchCaptureAddr+"/24", "dev", p+"v")
	benchRun(b, "ip", "-n", l.peer, "addr", "add", benchSenderAddr+"/24", "dev", p+"vp")
	benchRun(b, "ip", "-n", l.side, "link", "set", p+"v", "up")
	benchRun(b, "ip", "-n", l.peer, "link", "set", p+"vp", "up")
	testutil.InNetns(b, l.side, func() (err error) {
		l.sink, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(benchCaptureAddr), Port: 9})
		return err
	})
	b.Cleanup(func() { l.sink.Close() })
	// A first datagram resolves ARP, so no round starts with a queue.
	l.send(b, 64, 1)
	return l
}

func benchRun(b *testing.B, args ...string) {
	b.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		b.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// send runs the sender process in the peer namespace and returns how long
// it took to send.
func (l *benchLab) send(b *testing.B, size, count int) time.Duration {
	b.Helper()
	cmd := exec.Command("ip", "netns", "exec", l.peer, os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%d|%d", senderEnv, net.JoinHostPort(benchCaptureAddr, benchPort), size, count))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("sender: %v: %s", err, stderr.Bytes())
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		b.Fatalf("sender output %q: %v", out, err)
	}
	return time.Duration(ns)
}
