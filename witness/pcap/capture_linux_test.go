package pcap_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/pcapng"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/witness/pcap"
)

// captured is what a session's pcap files hold, decoded.
type captured struct {
	files    []string
	payloads map[string][]string // payload marker -> interfaces it was seen on
	sshPort  int                 // TCP segments to or from the listener's port
}

// readCapture decodes every pcap file of a session folder.
func readCapture(t *testing.T, dir string) captured {
	t.Helper()
	c := captured{payloads: map[string][]string{}}
	names, _ := filepath.Glob(filepath.Join(dir, "pcap", "*.pcapng"))
	sort.Strings(names)
	c.files = names
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := pcapng.NewReader(f, pcap.SnapLen)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for {
			p, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			c.note(p.Interface, p.Data)
		}
		f.Close()
	}
	return c
}

func (c *captured) note(intf pcapng.Interface, data []byte) {
	var first gopacket.Decoder = layers.LayerTypeEthernet
	if intf.LinkType == uint16(layers.LinkTypeRaw) {
		first = layers.LayerTypeIPv4
	}
	p := gopacket.NewPacket(data, first, gopacket.Default)
	if tcp, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP); ok {
		if tcp.SrcPort == 2222 || tcp.DstPort == 2222 {
			c.sshPort++
		}
	}
	var payload []byte
	if app := p.ApplicationLayer(); app != nil {
		payload = app.Payload()
	}
	if ic, ok := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); ok {
		// An error (port unreachable) quotes the datagram it answers:
		// only echoes count as ICMP traffic.
		payload = nil
		if t := ic.TypeCode.Type(); t == layers.ICMPv4TypeEchoRequest || t == layers.ICMPv4TypeEchoReply {
			payload = ic.Payload
		}
	}
	if i := bytes.Index(payload, []byte("mark-")); i >= 0 {
		m := string(payload[i:])
		c.payloads[m] = append(c.payloads[m], intf.Name)
	}
}

// has reports whether marker was captured (on any interface).
func (c captured) has(m string) bool { return len(c.payloads[m]) > 0 }

// traffic sends ICMP, UDP and TCP carrying marker between the sidecar
// and each peer, over both veth interfaces.
func (l *lab) traffic(marker string) {
	t := l.t
	for i, peer := range l.peers {
		peerAddr := fmt.Sprintf("10.231.%d.2", i+1)
		sideAddr := fmt.Sprintf("10.231.%d.1", i+1)
		sendUDP(t, peer, sideAddr, "mark-udp-"+marker)
		l.ping(peerAddr, "mark-icmp-"+marker)
		l.tcp(peer, peerAddr, "mark-tcp-"+marker)
	}
}

// ping sends one ICMP echo from the sidecar's namespace and waits for
// the reply.
func (l *lab) ping(addr, payload string) {
	testutil.InNetns(l.t, l.side, func() error {
		c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return err
		}
		defer c.Close()
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: 1, Data: []byte(payload)}}
		b, _ := msg.Marshal(nil)
		if _, err := c.WriteTo(b, &net.IPAddr{IP: net.ParseIP(addr)}); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 1500)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return fmt.Errorf("no echo reply from %s: %w", addr, err)
			}
			if m, err := icmp.ParseMessage(1, buf[:n]); err == nil && m.Type == ipv4.ICMPTypeEchoReply {
				return nil
			}
		}
	})
}

// tcp connects from the sidecar's namespace to a listener in peer and
// sends payload, which the peer reads whole.
func (l *lab) tcp(peer, addr, payload string) {
	var ln net.Listener
	testutil.InNetns(l.t, peer, func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(addr, "0"))
		return err
	})
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- string(b)
	}()
	testutil.InNetns(l.t, l.side, func() error {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return err
		}
		_, err = c.Write([]byte(payload))
		c.Close()
		return err
	})
	if s := <-got; s != payload {
		l.t.Fatalf("tcp to %s: peer read %q", addr, s)
	}
}

// TestPcapSessionWindows: the sidecar in a namespace with two veth
// interfaces and loopback; two overlapping sessions; traffic before,
// during, between and after; an interface added mid-session.
func TestPcapSessionWindows(t *testing.T) {
	requireTools(t)
	l := newLab(t)
	s := serve(t, l.side, "0.0.0.0:2222", nil)
	l.root, l.signer, l.hostPub, l.ready = s.root, s.signer, s.hostPub, s.ready
	if got := l.readiness()["pcap"]; got != "ok" {
		t.Fatalf("readiness pcap=%q, want ok", got)
	}
	addr := sidecarAddr + ":2222"
	l.traffic("before")
	a := l.open(l.peers[0], addr, "run1", "sess-a")
	l.traffic("a")
	sendUDP(t, l.side, "127.0.0.1", "mark-lo-a")
	// An interface that appears during the session is captured too.
	l.peers = append(l.peers, l.prefix+"p3")
	run(t, "ip", "netns", "add", l.peers[2])
	t.Cleanup(func() { exec.Command("ip", "netns", "del", l.peers[2]).Run() })
	l.link(l.prefix+"v3", l.peers[2], "10.231.3")
	sendUDP(t, l.peers[2], "10.231.3.1", "mark-udp-newif-a")
	b := l.open(l.peers[1], "10.231.2.1:2222", "run1", "sess-b")
	l.traffic("ab")
	l.end(a)
	l.traffic("b")
	l.end(b)
	l.traffic("after")

	ca, cb := readCapture(t, a.dir), readCapture(t, b.dir)
	want := func(c captured, who string, markers []string, present bool) {
		t.Helper()
		for _, m := range markers {
			for _, kind := range []string{"udp", "icmp", "tcp"} {
				mk := "mark-" + kind + "-" + m
				if c.has(mk) != present {
					t.Errorf("session %s: %s captured=%v, want %v (seen: %v)", who, mk, c.has(mk), present, keys(c.payloads))
				}
			}
		}
	}
	want(ca, "a", []string{"a", "ab"}, true)
	want(ca, "a", []string{"before", "b", "after"}, false)
	want(cb, "b", []string{"ab", "b"}, true)
	want(cb, "b", []string{"before", "a", "after"}, false)
	for _, m := range []string{"mark-lo-a", "mark-udp-newif-a"} {
		if !ca.has(m) {
			t.Errorf("session a: %s not captured", m)
		}
	}
	if n := len(ca.payloads["mark-lo-a"]); n != 1 {
		t.Errorf("loopback packet captured %d times, want once", n)
	}
	ifs := map[string]bool{}
	for _, seen := range ca.payloads {
		for _, n := range seen {
			ifs[n] = true
		}
	}
	for _, n := range []string{"lo", l.prefix + "v1", l.prefix + "v2", l.prefix + "v3"} {
		if !ifs[n] {
			t.Errorf("session a: nothing captured on interface %s (interfaces: %v)", n, ifs)
		}
	}
	if ca.sshPort+cb.sshPort != 0 {
		t.Errorf("the SSH sessions' own packets were captured: %d in a, %d in b", ca.sshPort, cb.sshPort)
	}
	for _, sess := range []*session{a, b} {
		readersAccept(t, sess.dir)
		verifyOK(t, sess.dir, s.hostPub)
	}
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// requireTools skips without tshark and tcpdump, which .ci/run installs.
func requireTools(t *testing.T) {
	for _, tool := range []string{"tshark", "tcpdump"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the pcap suite reads the files back with %s (Debian package %s)", tool, tool)
		}
	}
}

// readersAccept runs tshark -r and tcpdump -r on every pcap file of a
// session: each must read it with no warning at all.
func readersAccept(t *testing.T, dir string) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "pcap", "*"))
	if len(names) == 0 {
		t.Fatalf("%s: no pcap files", dir)
	}
	for _, name := range names {
		for _, args := range [][]string{{"tshark", "-n", "-r", name}, {"tcpdump", "-n", "-r", name}} {
			cmd := exec.Command(args[0], args[1:]...)
			var stderr bytes.Buffer
			cmd.Stderr, cmd.Stdout = &stderr, io.Discard
			err := cmd.Run()
			msg := strings.TrimSpace(stderr.String())
			// tcpdump names the file and link type on stderr, and tshark
			// notes that it runs as root; neither is about the file.
			msg = strings.TrimSpace(strings.TrimPrefix(msg, `Running as user "root" and group "root". This could be dangerous.`))
			if args[0] == "tcpdump" {
				msg = strings.TrimSpace(strings.TrimPrefix(msg, "reading from file "+name+", link-type EN10MB (Ethernet), snapshot length 262144"))
			}
			if err != nil || msg != "" {
				t.Errorf("%s: %v: %s", strings.Join(args, " "), err, msg)
			}
		}
	}
}

// verifyOK runs the examiner on a session and requires OK.
func verifyOK(t *testing.T, dir string, hostPub []byte) *evidence.Report {
	t.Helper()
	rep := verifyDir(t, dir, hostPub)
	if !rep.OK() {
		b, _ := json.MarshalIndent(rep, "", " ")
		t.Fatalf("verify %s: not OK:\n%s", dir, b)
	}
	return rep
}

func verifyDir(t *testing.T, dir string, hostPub []byte) *evidence.Report {
	t.Helper()
	keys, err := evidence.ParseKeys(hostPub, "host key")
	if err != nil {
		t.Fatal(err)
	}
	return evidence.Verify(dir, keys, evidence.Options{})
}

// closeRecord returns the session's close record.
func closeRecord(t *testing.T, dir string) integrity.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "pty", "integrity.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var r integrity.Record
		if json.Unmarshal(line, &r) == nil && r.Type == "close" {
			return r
		}
	}
	t.Fatalf("%s: no close record", dir)
	return integrity.Record{}
}
