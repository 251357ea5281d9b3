package pcap

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
)

// The engine's ring walk on blocks the test lays out as the kernel does
// (TPACKET_V3: a block descriptor, then each packet's tpacket3_hdr and
// sockaddr_ll, its data at tp_mac), without a socket.

const testBlockSize = 4096

// blockPacket is one packet header the test writes into a block.
type blockPacket struct {
	off       int    // where its tpacket3_hdr is
	next      uint32 // tp_next_offset
	mac       uint16 // its data, from its header
	snap, len uint32
}

// testBlock returns a block whose descriptor counts num packets from
// first, with pkts written where they say (on interface 7). Like a block
// of the ring, it is followed by more memory (the next block), so a read
// past its end reads bytes, not a fault.
func testBlock(num, first uint32, pkts ...blockPacket) []byte {
	buf := make([]byte, 2*testBlockSize)
	hdr := (*unix.TpacketHdrV1)(unsafe.Pointer(&buf[blockDescHdr]))
	hdr.Block_status, hdr.Num_pkts, hdr.Offset_to_first_pkt, hdr.Blk_len = unix.TP_STATUS_USER, num, first, testBlockSize
	for _, p := range pkts {
		ph := (*unix.Tpacket3Hdr)(unsafe.Pointer(&buf[p.off]))
		ph.Next_offset, ph.Sec, ph.Snaplen, ph.Len, ph.Mac = p.next, 1700000000, p.snap, p.len, p.mac
		sll := (*unix.RawSockaddrLinklayer)(unsafe.Pointer(&buf[p.off+tpacketHdrLen]))
		sll.Family, sll.Ifindex, sll.Hatype = unix.AF_PACKET, 7, unix.ARPHRD_ETHER
	}
	return buf[:testBlockSize]
}

// blockEngine is an engine with no socket whose interface 7 is known.
func blockEngine() *Engine {
	return &Engine{ifaces: map[int]ifaceInfo{7: {name: "eth7", linkType: layers.LinkTypeEthernet}}}
}

// catchAllTap is a session whose window is open from the zero time, so
// every packet the engine hands it counts in its interfaces' stats.
func catchAllTap(t *testing.T) *tap {
	tp := newTap(idleEngine{}, testFiles(t, t.TempDir()), func() {})
	tp.started = true
	return tp
}

// delivered returns the packets and bytes tp was handed, and closes it.
func delivered(t *testing.T, tp *tap) (packets, bytes int64) {
	t.Helper()
	tp.mu.Lock()
	for _, st := range tp.ifaces {
		packets += st.Packets
		bytes += st.Bytes
	}
	tp.mu.Unlock()
	if _, err := tp.Close(func(string, map[string]string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return packets, bytes
}

// TestDeliverBlockReadsWhatTheBlockHolds: the engine hands a session
// exactly the packets the block's descriptor counts, each whose header
// and data lie in the block, up to its last byte; nothing of the
// descriptor itself, of stale bytes after the packets counted (a reused
// block is not cleared), or of a header or data running past its end.
func TestDeliverBlockReadsWhatTheBlockHolds(t *testing.T) {
	const L = testBlockSize
	for _, c := range []struct {
		name           string
		blk            []byte
		packets, bytes int64
	}{
		{"one packet counted, a stale one after it", testBlock(1, 64, blockPacket{off: 64, next: 192, mac: 80, snap: 60, len: 60}, blockPacket{off: 256, next: 192, mac: 80, snap: 70, len: 70}), 1, 60},
		{"the first packet at offset 0 (the descriptor)", testBlock(1, 0), 0, 0},
		{"a header running past the block's end", testBlock(2, 64, blockPacket{off: 64, next: L - 60 - 64, mac: 80, snap: 60, len: 60}, blockPacket{off: L - 60}), 1, 60},
		{"a header ending at the block's end", testBlock(2, 64, blockPacket{off: 64, next: L - 68 - 64, mac: 80, snap: 60, len: 60}, blockPacket{off: L - 68, mac: 68, len: 50}), 2, 110},
		{"data ending at the block's end", testBlock(2, 64, blockPacket{off: 64, next: L - 108 - 64, mac: 80, snap: 60, len: 60}, blockPacket{off: L - 108, mac: 68, snap: 40, len: 40}), 2, 100},
		{"data running past the block's end", testBlock(2, 64, blockPacket{off: 64, next: L - 108 - 64, mac: 80, snap: 60, len: 60}, blockPacket{off: L - 108, mac: 68, snap: 41, len: 41}), 1, 60},
		{"an empty packet", testBlock(2, 64, blockPacket{off: 64, next: 192, mac: 80, snap: 60, len: 60}, blockPacket{off: 256, mac: 80, len: 90}), 2, 150},
		{"no next offset", testBlock(2, 64, blockPacket{off: 64, mac: 80, snap: 60, len: 60}), 1, 60},
	} {
		e := blockEngine()
		tp := catchAllTap(t)
		e.taps.Store(&[]*tap{tp})
		e.deliverBlock(c.blk)
		if packets, bytes := delivered(t, tp); packets != c.packets || bytes != c.bytes {
			t.Errorf("%s: %d packets of %d bytes delivered, want %d of %d", c.name, packets, bytes, c.packets, c.bytes)
		}
	}
}

// TestDeliverBlockHandsOffEachSession: after a block, every attached
// session's batch goes to its writer at once, so a quiet capture reaches
// the files within a block's timeout; a block while no session was ever
// attached is passed over.
func TestDeliverBlockHandsOffEachSession(t *testing.T) {
	blk := testBlock(1, 64, blockPacket{off: 64, mac: 80, snap: 60, len: 60})
	blockEngine().deliverBlock(blk) // no session: nothing to hand to, no fault

	e := blockEngine()
	a, b := catchAllTap(t), catchAllTap(t)
	e.taps.Store(&[]*tap{a, b})
	e.deliverBlock(blk)
	for i, tp := range []*tap{a, b} {
		tp.mu.Lock()
		kept := tp.filling != nil
		tp.mu.Unlock()
		if kept {
			t.Errorf("session %d: its batch was kept after the block, not handed to its writer", i)
		}
		if packets, _ := delivered(t, tp); packets != 1 {
			t.Errorf("session %d: %d packets delivered, want 1", i, packets)
		}
	}
}

// TestIfaceNames: a packet's interface is named as the namespace names
// it (loopback "lo", written as Ethernet), and one that is gone by the
// time its first packet is read by its index.
func TestIfaceNames(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface to name: %v", err)
	}
	e := &Engine{ifaces: map[int]ifaceInfo{}}
	if got, want := e.iface(lo.Index, unix.ARPHRD_LOOPBACK), (ifaceInfo{name: "lo", linkType: layers.LinkTypeEthernet}); got != want {
		t.Errorf("interface %d: %+v, want %+v", lo.Index, got, want)
	}
	const gone = 1 << 30
	if _, err := net.InterfaceByIndex(gone); err == nil {
		t.Skipf("interface %d exists here", gone)
	}
	if got, want := e.iface(gone, unix.ARPHRD_NONE), (ifaceInfo{name: "if1073741824", linkType: layers.LinkTypeRaw}); got != want {
		t.Errorf("interface %d: %+v, want %+v", gone, got, want)
	}
}

// TestIdleLoopWaitsAndClaimsOnlyWhatWasDelivered: on an empty ring the
// loop waits for the socket, pollTimeout at a time (no spinning, no
// error), between scans; and each scan claims delivery only up to
// 2*blockTimeout before it, since the block the kernel is filling may
// hold packets stamped up to blockTimeout earlier. A closing session
// relies on that claim to know its window's packets were all delivered.
func TestIdleLoopWaitsAndClaimsOnlyWhatWasDelivered(t *testing.T) {
	var log testutil.LockedBuffer
	// fd -1: poll waits out its timeout on it, the socket is never ready.
	e := &Engine{fd: -1, ring: make([]byte, ringBlockSize), log: slog.New(slog.NewTextHandler(&log, nil)),
		ifaces: map[int]ifaceInfo{}, caughtCh: make(chan struct{}), done: make(chan struct{})}
	go e.loop()
	defer func() {
		e.stop.Store(true)
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			t.Error("the loop did not stop")
		}
	}()
	// next waits for the loop's next claim and returns it and its lag.
	next := func() (time.Time, time.Duration) {
		t.Helper()
		e.caughtMu.Lock()
		ch := e.caughtCh
		e.caughtMu.Unlock()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the loop claimed no progress")
		}
		e.caughtMu.Lock()
		defer e.caughtMu.Unlock()
		return e.caught, time.Since(e.caught)
	}
	prev, lag := next()
	if lag < 2*blockTimeout {
		t.Errorf("the loop claims delivery up to %v ago, want at least %v", lag, 2*blockTimeout)
	}
	// The longest of three waits: a signal may cut one short.
	var longest time.Duration
	for range 3 {
		c, _ := next()
		longest, prev = max(longest, c.Sub(prev)), c
	}
	if longest < pollTimeout/2 {
		t.Errorf("scans of an empty ring at most %v apart, want about pollTimeout (%v): the loop does not wait", longest, pollTimeout)
	}
	if s := log.String(); strings.Contains(s, "poll the capture socket") {
		t.Errorf("the loop's wait failed: %s", s)
	}
}
