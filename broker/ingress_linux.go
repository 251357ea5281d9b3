package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/capability"
)

// The loopback guard: what the workload cannot forge.
//
// The workload shares the sidecar's network namespace, and root there has
// NET_RAW. With a raw socket it sends a SYN from any source address it
// likes, reads the SYN-ACK on the external interface (it leaves by the
// route to that address) and sends the ACK: a TCP handshake from a remote
// address that never spoke, which the per-source limit (preauth.go) counts
// as a host of its own. 20 such addresses held every unauthenticated slot.
//
// What it cannot forge is the device its packets enter through. A packet a
// process in this namespace generates for an address of this namespace is
// delivered through the loopback device, even when it is addressed to the
// external interface's address; a packet enters through the external
// interface only from outside (a raw or packet socket's frame on that
// interface is transmitted, not received). Measured on Linux 6.18 with the
// raw-socket spoofer of tests/preauth_spoof_test.go: its SYN is received on
// lo, not on the veth. The socket layer does not show this: the accepted
// socket's IP_PKTINFO names the external interface (the kernel reports the
// device that owns the destination address), and a listener bound to the
// external interface with SO_BINDTODEVICE accepts the spoofed handshake
// too. The packet's own device does show it, and a socket filter reads it.
//
// So the listener carries a classic BPF socket filter that the kernel runs
// on every segment for it, the SYN and the handshake's last ACK included,
// before it keeps any state: a segment that entered through loopback must
// come from an address of this namespace (127.0.0.0/8, ::1, the interfaces'
// addresses); any other is dropped without an answer. A forged handshake
// then never completes, never holds a slot, and never fills the kernel's SYN
// queue either (which would turn on SYN cookies, and with them lose what
// the kernel knows of each SYN). Connections from the namespace's own
// addresses still come in, as the one local source the per-source limit
// bounds (localaddrs.go). Segments from other devices are not looked at.
// An accepted connection keeps the filter it inherits: a segment forged
// into a tool server's connection (a reset, say) would also come through
// loopback from the tool server's address, and is dropped the same way; a
// segment from any other device costs the filter three instructions.
//
// The filter cannot be changed by another process. Mainline kernels let
// any process attach one to its own socket, but this machine's kernel
// (6.18.44-fc) refuses SO_ATTACH_FILTER on a TCP socket with EPERM without
// CAP_NET_ADMIN (UDP, raw and packet sockets take one under NET_RAW),
// measured with a two-instruction filter. So the Compose sidecar adds
// NET_ADMIN, and holds it only for the attach: serve lowers it from the
// effective set of every thread once the listener is guarded, and
// attachGuard raises it on one locked thread for the setsockopt
// (internal/capability). Without NET_ADMIN permitted the listener opens
// unguarded, never lost for want of the filter, and Serve logs that the
// guard is not installed (docs/ARCHITECTURE.md, "Admission before
// authentication").
// Its list follows the interfaces' addresses, reread every
// guardRefreshEvery; an address added since is not yet a source loopback
// may carry until then (its SYN is dropped and the client's retry, a second
// later, gets through after the next reread).

// guardRefreshEvery bounds how stale the filter's address list is.
const guardRefreshEvery = 2 * time.Second

// Bounds of the filter's address list, so that the program stays far below
// the kernel's 4096 instructions (4 per IPv4 prefix, 9 per IPv6 address).
// Addresses past them are not sources loopback may carry; a warning says so.
const (
	guardMaxV4 = 256
	guardMaxV6 = 160
)

// Classic BPF: offsets from the network header, and the accept and drop
// verdicts (the number of bytes kept).
const (
	skfNetOff   = 0xfff00000 // SKF_NET_OFF, -0x100000 as uint32
	guardAccept = 0xffffffff
	guardDrop   = 0
)

// guardSources is what the filter lets through loopback: IPv4 prefixes and
// whole IPv6 addresses.
type guardSources struct {
	loopbackIndex int
	v4            []netip.Prefix
	v6            []netip.Addr
}

// guardProgram assembles the filter: segments not from the loopback device
// pass; from it, IPv4 ones whose source is in one of v4's prefixes and
// IPv6 ones whose source is one of v6's addresses pass; the rest are
// dropped.
func guardProgram(s guardSources) ([]bpf.RawInstruction, error) {
	if len(s.v4) > guardMaxV4 || len(s.v6) > guardMaxV6 {
		return nil, fmt.Errorf("loopback guard: %d IPv4 and %d IPv6 sources, at most %d and %d", len(s.v4), len(s.v6), guardMaxV4, guardMaxV6)
	}
	var v4, v6 []bpf.Instruction
	for _, p := range s.v4 {
		a := p.Addr().As4()
		word := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		mask := ^uint32(0) << (32 - p.Bits())
		if p.Bits() == 0 {
			mask = 0
		}
		v4 = append(v4, bpf.LoadAbsolute{Off: skfNetOff + 12, Size: 4}) // source address
		if mask != ^uint32(0) {
			v4 = append(v4, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mask})
		}
		v4 = append(v4, bpf.JumpIf{Cond: bpf.JumpEqual, Val: word & mask, SkipFalse: 1}, bpf.RetConstant{Val: guardAccept})
	}
	v4 = append(v4, bpf.RetConstant{Val: guardDrop})
	for _, a := range s.v6 {
		b := a.As16()
		// Compare the source's four words; a mismatch skips the rest of
		// this address's 9 instructions.
		for w := range 4 {
			word := uint32(b[4*w])<<24 | uint32(b[4*w+1])<<16 | uint32(b[4*w+2])<<8 | uint32(b[4*w+3])
			left := uint8(7 - 2*w) // instructions after this word's jump, up to the next address
			v6 = append(v6, bpf.LoadAbsolute{Off: skfNetOff + 8 + uint32(4*w), Size: 4},
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: word, SkipFalse: left})
		}
		v6 = append(v6, bpf.RetConstant{Val: guardAccept})
	}
	v6 = append(v6, bpf.RetConstant{Val: guardDrop})

	prog := []bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtInterfaceIndex},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(s.loopbackIndex), SkipTrue: 1},
		bpf.RetConstant{Val: guardAccept}, // not through loopback
		bpf.LoadExtension{Num: bpf.ExtProto},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.ETH_P_IP, SkipFalse: 1},
		bpf.Jump{Skip: 3}, // to the IPv4 list
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.ETH_P_IPV6, SkipFalse: 1},
		bpf.Jump{Skip: uint32(len(v4)) + 1}, // past the IPv4 list
		bpf.RetConstant{Val: guardDrop},     // neither
	}
	prog = append(append(prog, v4...), v6...)
	return bpf.Assemble(prog)
}

// namespaceSources lists what loopback may carry in this namespace: the
// loopback device's index, 127.0.0.0/8, ::1 and every interface address.
func namespaceSources() (guardSources, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return guardSources{}, err
	}
	s := guardSources{
		v4: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		v6: []netip.Addr{netip.IPv6Loopback()},
	}
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagLoopback != 0 && s.loopbackIndex == 0 {
			s.loopbackIndex = ifi.Index
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			return guardSources{}, err
		}
		for _, a := range interfaceAddrs(addrs) {
			switch {
			case a.IsLoopback():
			case a.Is4():
				s.v4 = append(s.v4, netip.PrefixFrom(a, 32))
			default:
				s.v6 = append(s.v6, a)
			}
		}
	}
	if s.loopbackIndex == 0 {
		return guardSources{}, errors.New("no loopback device in this network namespace")
	}
	slices.SortFunc(s.v4, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	s.v4 = slices.Compact(s.v4)
	slices.SortFunc(s.v6, func(a, b netip.Addr) int { return a.Compare(b) })
	s.v6 = slices.Compact(s.v6)
	return s, nil
}

// trimmed cuts the lists to the filter's bounds and says how many were cut.
func (s guardSources) trimmed() (guardSources, int) {
	cut := 0
	if n := len(s.v4); n > guardMaxV4 {
		s.v4, cut = s.v4[:guardMaxV4], cut+n-guardMaxV4
	}
	if n := len(s.v6); n > guardMaxV6 {
		s.v6, cut = s.v6[:guardMaxV6], cut+n-guardMaxV6
	}
	return s, cut
}

func (s guardSources) equal(o guardSources) bool {
	return s.loopbackIndex == o.loopbackIndex && slices.Equal(s.v4, o.v4) && slices.Equal(s.v6, o.v6)
}

// attachGuard installs the filter on fd, replacing the one it has.
func attachGuard(fd int, s guardSources) error {
	raw, err := guardProgram(s)
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	attach := func() error { return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog) }
	if capability.Permitted(unix.CAP_NET_ADMIN) {
		// Held for this call only: serve lowers it once the listener is
		// guarded (see the comment at the top of this file).
		err = capability.WithRaised(unix.CAP_NET_ADMIN, attach)
	} else {
		err = attach()
	}
	if err != nil {
		return fmt.Errorf("loopback guard: SO_ATTACH_FILTER: %w", err)
	}
	return nil
}

// loopbackGuard keeps one listener's filter in step with the namespace's
// addresses.
type loopbackGuard struct {
	raw     syscall.RawConn
	log     *slog.Logger
	sources func() (guardSources, error) // namespaceSources; tests replace it

	mu   sync.Mutex // guards last
	last guardSources
}

// guardListener installs the guard on ln and returns it; a listener other
// than TCP is left alone (nil, nil).
func guardListener(ln net.Listener, log *slog.Logger) (*loopbackGuard, error) {
	tcp, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, nil
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return nil, err
	}
	g := &loopbackGuard{raw: raw, log: log, sources: namespaceSources}
	return g, g.refresh()
}

// refresh rereads the addresses and replaces the filter when they changed.
func (g *loopbackGuard) refresh() error {
	s, err := g.sources()
	if err != nil {
		return fmt.Errorf("loopback guard: the namespace's addresses: %w", err)
	}
	s, cut := s.trimmed()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last.loopbackIndex != 0 && s.equal(g.last) {
		return nil
	}
	var aerr error
	if err := g.raw.Control(func(fd uintptr) { aerr = attachGuard(int(fd), s) }); err != nil {
		return err
	}
	if errors.Is(aerr, unix.EOPNOTSUPP) {
		return fmt.Errorf("%w (an MPTCP listener takes no socket filter: open it with broker.Listen)", aerr)
	}
	if aerr != nil {
		return aerr
	}
	g.last = s
	if cut > 0 {
		g.log.Warn("loopback guard: more addresses than the filter holds; connections from the rest through loopback are dropped",
			"addresses_not_held", cut, "max_ipv4", guardMaxV4, "max_ipv6", guardMaxV6)
	}
	return nil
}

// run refreshes the filter every guardRefreshEvery until stop is closed.
// A failed refresh keeps the last filter and is logged.
func (g *loopbackGuard) run(stop <-chan struct{}) {
	t := time.NewTicker(guardRefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := g.refresh(); err != nil {
				g.log.Warn("loopback guard not refreshed; the last address list stays", "err", err.Error())
			}
		}
	}
}

// Listen opens a TCP listener for the SSH port with the loopback guard in
// place before it binds, so that no forged handshake completes between the
// listen and Serve (which keeps the guard up to date).
//
// Plain TCP, not MPTCP, which Go's listeners use by default where the
// kernel has it: an MPTCP socket refuses socket filters (EOPNOTSUPP,
// measured on Linux 6.18), and SSH clients speak plain TCP anyway.
func Listen(addr string) (net.Listener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	lc.Control = func(_, _ string, c syscall.RawConn) error {
		s, err := namespaceSources()
		if err != nil {
			return fmt.Errorf("loopback guard: the namespace's addresses: %w", err)
		}
		s, _ = s.trimmed()
		var aerr error
		if err := c.Control(func(fd uintptr) { aerr = attachGuard(int(fd), s) }); err != nil {
			return err
		}
		if errors.Is(aerr, unix.EPERM) {
			// Seen without NET_ADMIN on kernels that want it (see the
			// top of this file): the listener opens without the guard,
			// and Serve, which tries again, logs that it is not
			// installed, so the SSH port is never lost for want of it.
			return nil
		}
		return aerr
	}
	return lc.Listen(context.Background(), "tcp", addr)
}
