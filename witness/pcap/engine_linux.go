package pcap

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
)

// The engine: one AF_PACKET socket, bound to no interface, sees every
// interface of the network namespace, including interfaces that appear
// after it started, and fills a TPACKET_V3 ring (blocks of packets the
// kernel hands over whole, no system call per packet). One goroutine
// walks the ring and hands each packet to every attached session's tap.
// Nothing is built from input: the filter (filter.go) and the ring's shape
// are fixed.
//
// The socket captures only while a session is attached. Bound to every
// protocol (ETH_P_ALL), it is on the kernel's list of taps that every
// packet of the namespace is handed to, sent or received (on older
// kernels, whose list of taps is host-wide, every packet of the host,
// which the socket drops as another namespace's); what its filter accepts
// is copied into the ring, whether a session wants it or not: beside an
// idle sidecar that accepted everything, sshd's loopback throughput fell
// from 425 to 323 MB/s. So while no session is attached the socket's
// filter is idleFilter, which accepts nothing, and the first session to
// attach swaps in the capture filter; the last to detach swaps idleFilter
// back. A filter swap returns at once: the kernel frees the old program
// after a grace period without waiting for it, and a CPU already running
// the old program on a packet finishes that packet with it. That instant
// is no window's edge: a session's window is cut by the packets' kernel
// timestamps (tap.go), it opens after attach returns, and a closing
// session waits for the ring to pass its end before it detaches.
// Changing the protocol of a bound socket instead would wait: it takes
// the socket off the list of taps and waits out a network RCU grace
// period (synchronize_net in packet_do_bind, net/packet/af_packet.c), 8
// to 20 ms measured here, which was the larger part of a session's start
// whenever it was the only one. The socket is bound once, after its filter
// and ring are in place (the first bind of a never-bound socket does not
// wait). What stays while idle is the kernel handing each packet to the
// socket and running one BPF instruction on it (and cloning each sent
// packet for it); the old way's idle protocol, 0x05ff, also let a packet
// of that protocol (a tun device can be handed any) into the ring.

// The ring: ringBlocks blocks of ringBlockSize. A block is handed over
// when full or blockTimeout after its first packet, so a quiet capture is
// still delivered (and a session's window closed) within milliseconds.
const (
	ringBlockSize = 1 << 20
	ringBlocks    = 32
	blockTimeout  = 8 * time.Millisecond
	// pollTimeout bounds one wait for a block, so the loop notices stop.
	pollTimeout = 50 * time.Millisecond
	// catchUpBound bounds how long a closing session waits for the ring
	// to reach its end.
	catchUpBound = time.Second
	// tpacketHdrLen is TPACKET_ALIGN(sizeof(struct tpacket3_hdr)): the
	// sockaddr_ll follows it.
	tpacketHdrLen = 48
	blockDescHdr  = 8 // version and offset_to_priv before tpacket_hdr_v1
)

// Engine captures for every session of the sidecar.
type Engine struct {
	fd   int
	ring []byte
	log  *slog.Logger

	taps      atomic.Pointer[[]*tap] // replaced whole on attach and detach
	tapsMu    sync.Mutex             // serializes attach and detach, and the socket's filter
	filter    []bpfInstruction       // the capture filter, in place while a session is attached
	capturing bool                   // filter is in place (else idleFilter); under tapsMu

	statsMu  sync.Mutex // protects dropped and received
	dropped  uint64     // kernel drops summed over the engine's life
	received uint64     // packets the kernel gave the socket, likewise (the idle test reads it)

	ifaces map[int]ifaceInfo // owned by the loop goroutine

	batches batchBudget // the sessions' outstanding batches (queue.go)

	// caught is the time before which every packet has been delivered;
	// caughtCh is closed and replaced whenever it advances.
	caughtMu sync.Mutex
	caught   time.Time
	caughtCh chan struct{}

	stop atomic.Bool
	done chan struct{}
}

type ifaceInfo struct {
	name     string
	linkType layers.LinkType // LinkTypeNull: not written
}

// StartEngine opens the capture socket (CAP_NET_RAW is needed), attaches
// the filter that leaves out the SSH listener's port, maps the ring and
// starts the loop; the socket captures from the first session's attach.
// Close stops it.
func StartEngine(listenPort uint16, log *slog.Logger) (*Engine, error) {
	filter, err := listenerFilter(listenPort)
	if err != nil {
		return nil, err
	}
	// Protocol 0: the socket receives nothing until it is bound, after
	// idleFilter and the ring are in place.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pcap: open a packet socket: %w", err)
	}
	e := &Engine{fd: fd, filter: filter, log: log, ifaces: map[int]ifaceInfo{}, caughtCh: make(chan struct{}), done: make(chan struct{})}
	e.batches.limit = engineBatches
	if err := e.setup(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	go e.loop()
	return e, nil
}

// setup puts idleFilter and the ring in place, then binds the socket to
// every protocol.
func (e *Engine) setup() error {
	if err := e.attachFilter(idleFilter); err != nil {
		return fmt.Errorf("pcap: attach the idle filter: %w", err)
	}
	if err := unix.SetsockoptInt(e.fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return fmt.Errorf("pcap: select TPACKET_V3: %w", err)
	}
	req := unix.TpacketReq3{
		Block_size: ringBlockSize, Block_nr: ringBlocks,
		Frame_size: 1 << 11, Frame_nr: ringBlockSize / (1 << 11) * ringBlocks,
		Retire_blk_tov: uint32(blockTimeout / time.Millisecond),
	}
	if err := unix.SetsockoptTpacketReq3(e.fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fmt.Errorf("pcap: set up the capture ring: %w", err)
	}
	ring, err := unix.Mmap(e.fd, 0, ringBlockSize*ringBlocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_LOCKED|unix.MAP_POPULATE)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOMEM) {
		ring, err = unix.Mmap(e.fd, 0, ringBlockSize*ringBlocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err != nil {
		return fmt.Errorf("pcap: map the capture ring: %w", err)
	}
	e.ring = ring
	if err := unix.Bind(e.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL)}); err != nil {
		unix.Munmap(ring)
		return fmt.Errorf("pcap: bind the packet socket to every protocol: %w", err)
	}
	return nil
}

// attachFilter makes filter the socket's filter, replacing the one before.
func (e *Engine) attachFilter(filter []bpfInstruction) error {
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: (*unix.SockFilter)(unsafe.Pointer(&filter[0]))}
	return unix.SetsockoptSockFprog(e.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Close stops the loop and releases the ring and the socket. The loop
// never reads after this (a closed gopacket handle can spin on its error,
// upstream issue 722): it checks stop between polls, and the socket is
// closed only once it has returned.
func (e *Engine) Close() error {
	if e.stop.Swap(true) {
		return nil
	}
	<-e.done
	return errors.Join(unix.Munmap(e.ring), unix.Close(e.fd))
}

func (e *Engine) loop() {
	defer close(e.done)
	statsEvery := time.NewTicker(time.Second)
	defer statsEvery.Stop()
	for i := 0; !e.stop.Load(); {
		scanned := time.Now()
		blk := e.ring[i*ringBlockSize : (i+1)*ringBlockSize]
		status := (*uint32)(unsafe.Pointer(&blk[blockDescHdr]))
		if atomic.LoadUint32(status)&unix.TP_STATUS_USER == 0 {
			// Every packet stamped before the block now open was
			// delivered: that block is at most blockTimeout old.
			e.caughtUp(scanned.Add(-2 * blockTimeout))
			e.wait()
			select {
			case <-statsEvery.C:
				e.readStats()
			default:
			}
			continue
		}
		e.deliverBlock(blk)
		atomic.StoreUint32(status, unix.TP_STATUS_KERNEL)
		i = (i + 1) % ringBlocks
	}
}

// wait polls for the next block, at most pollTimeout.
func (e *Engine) wait() {
	fds := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN | unix.POLLERR}}
	if _, err := unix.Poll(fds, int(pollTimeout/time.Millisecond)); err != nil && !safefs.Interrupted(err) {
		e.log.Warn("pcap: poll the capture socket", "err", err.Error())
	}
}

// deliverBlock hands each packet of a block to every attached tap, then
// has each pass what it collected to its writer (queue.go).
func (e *Engine) deliverBlock(blk []byte) {
	hdr := (*unix.TpacketHdrV1)(unsafe.Pointer(&blk[blockDescHdr]))
	taps := e.taps.Load()
	off := int(hdr.Offset_to_first_pkt)
	for n := uint32(0); n < hdr.Num_pkts; n++ {
		if off <= 0 || off+tpacketHdrLen+int(unsafe.Sizeof(unix.RawSockaddrLinklayer{})) > len(blk) {
			break
		}
		ph := (*unix.Tpacket3Hdr)(unsafe.Pointer(&blk[off]))
		start, end := off+int(ph.Mac), off+int(ph.Mac)+int(ph.Snaplen)
		if taps != nil && end <= len(blk) && start <= end {
			sll := (*unix.RawSockaddrLinklayer)(unsafe.Pointer(&blk[off+tpacketHdrLen]))
			info := e.iface(int(sll.Ifindex), sll.Hatype)
			p := packet{ts: time.Unix(int64(ph.Sec), int64(ph.Nsec)), ifindex: int(sll.Ifindex), ifname: info.name,
				linkType: info.linkType, data: blk[start:end], length: int(ph.Len)}
			for _, t := range *taps {
				t.deliver(&p)
			}
		}
		if ph.Next_offset == 0 {
			break
		}
		off += int(ph.Next_offset)
	}
	if taps != nil {
		for _, t := range *taps {
			t.handOff()
		}
	}
}

// iface names an interface and the link type its frames are written as.
// Interfaces are looked up once, when their first packet arrives.
func (e *Engine) iface(index int, hatype uint16) ifaceInfo {
	if info, ok := e.ifaces[index]; ok {
		return info
	}
	info := ifaceInfo{name: "if" + fmt.Sprint(index), linkType: linkTypeOf(hatype)}
	if ifc, err := net.InterfaceByIndex(index); err == nil {
		info.name = ifc.Name
	}
	e.ifaces[index] = info
	return info
}

// linkTypeOf maps an ARPHRD_* hardware type to the pcap link type of what
// a raw packet socket delivers for it.
func linkTypeOf(hatype uint16) layers.LinkType {
	switch hatype {
	case unix.ARPHRD_ETHER, unix.ARPHRD_LOOPBACK:
		return layers.LinkTypeEthernet
	case unix.ARPHRD_NONE, unix.ARPHRD_TUNNEL, unix.ARPHRD_TUNNEL6, unix.ARPHRD_SIT:
		return layers.LinkTypeRaw
	}
	return layers.LinkTypeNull
}

// attach publishes t. The first tap turns capture on before, so the
// window its tap opens once attach returns sees every packet; when that
// fails, t is not attached and the error says why.
func (e *Engine) attach(t *tap) error {
	e.tapsMu.Lock()
	defer e.tapsMu.Unlock()
	if !e.capturing {
		if err := e.attachFilter(e.filter); err != nil {
			err = fmt.Errorf("pcap: start capturing: attach the capture filter: %w", err)
			e.log.Warn("pcap: a session is recorded without packets", "err", err.Error())
			return err
		}
		e.capturing = true
	}
	var next []*tap
	if cur := e.taps.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, t)
	e.taps.Store(&next)
	return nil
}

// detach unpublishes t. The last tap turns capture off after: its Close
// has waited for the ring to catch up with its window, so nothing of it
// is still to come. What the kernel captured before is still delivered
// (to no one, unless a session attaches meanwhile).
func (e *Engine) detach(t *tap) {
	e.tapsMu.Lock()
	defer e.tapsMu.Unlock()
	var next []*tap
	if cur := e.taps.Load(); cur != nil {
		for _, o := range *cur {
			if o != t {
				next = append(next, o)
			}
		}
	}
	e.taps.Store(&next)
	if len(next) > 0 || !e.capturing {
		return
	}
	if err := e.attachFilter(idleFilter); err != nil {
		// Capture stays on, at the workload's expense, until the last
		// session open then detaches and tries again.
		e.log.Warn("pcap: stop capturing while no session is open: attach the idle filter", "err", err.Error())
		return
	}
	e.capturing = false
}

// readStats adds the kernel's counters, which reset on every read, to
// the engine's running total.
func (e *Engine) readStats() {
	st, err := unix.GetsockoptTpacketStatsV3(e.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		e.log.Warn("pcap: read the capture statistics", "err", err.Error())
		return
	}
	e.statsMu.Lock()
	e.dropped += uint64(st.Drops)
	e.received += uint64(st.Packets)
	e.statsMu.Unlock()
}

func (e *Engine) drops() uint64 {
	e.readStats()
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.dropped
}

func (e *Engine) budget() *batchBudget { return &e.batches }

func (e *Engine) caughtUp(t time.Time) {
	e.caughtMu.Lock()
	defer e.caughtMu.Unlock()
	if t.After(e.caught) {
		e.caught = t
		close(e.caughtCh)
		e.caughtCh = make(chan struct{})
	}
}

// waitCaught waits, within catchUpBound, until every packet the kernel
// timestamped before t has been delivered. It returns the instant the
// ring had caught up to, and whether that is t or later; when not (the bound passed, or the engine stopped), packets
// the kernel captured between that instant and t never reach the session.
func (e *Engine) waitCaught(t time.Time) (time.Time, bool) {
	deadline := time.NewTimer(catchUpBound)
	defer deadline.Stop()
	for {
		e.caughtMu.Lock()
		caught, ch := e.caught, e.caughtCh
		e.caughtMu.Unlock()
		if !caught.Before(t) {
			return caught, true
		}
		if e.stop.Load() {
			return caught, false
		}
		select {
		case <-ch:
		case <-e.done:
			return caught, false
		case <-deadline.C:
			e.log.Warn("pcap: the capture ring did not catch up with a closing session in time")
			return caught, false
		}
	}
}
