package pcap

import (
	"fmt"

	"golang.org/x/net/bpf"

	"github.com/aptl/aptl-kali-capture/internal/pcapng"
)

// The capture filter is fixed: nothing in it comes from a user or a
// session. It runs in the kernel, on every packet of every interface,
// before anything is copied to the ring, and
//   - drops TCP segments to or from the SSH listener's port (IPv4, and
//     IPv6 without extension headers), so the sidecar's own sessions are
//     not in their captures (tcpdump's `not port 22` in the lab before);
//   - drops the outgoing copy of a loopback packet, which the kernel hands
//     a packet socket twice (out, then in), as libpcap does for `-i any`;
//   - accepts everything else, cut at SnapLen.
// Loads relative to the network header (skfNetOff) make it independent of
// each interface's link-layer header (Ethernet, none on a tun, ...).

// SnapLen is the most of a packet that is kept (internal/pcapng says why
// it is that): a longer frame (BIG TCP) is cut there and counted (the
// close record's pcap_truncated), and the files say it as every
// interface's snap length, the bound they are read back with.
const SnapLen = pcapng.SnapLen

// skfNetOff is the kernel's SKF_NET_OFF: a load at skfNetOff+k reads byte
// k of the network header.
const skfNetOff = 0xFFF00000 // -0x100000 as the uint32 the kernel reads

const (
	etherTypeIPv4    = 0x0800
	etherTypeIPv6    = 0x86dd
	ipProtoTCP       = 6
	packetOutgoing   = 4   // PACKET_OUTGOING
	arphrdLoopback   = 772 // ARPHRD_LOOPBACK
	ipv4FragMask     = 0x1fff
	ipv6HeaderLength = 40
)

// listenerFilter assembles the filter for an SSH listener on port.
func listenerFilter(port uint16) ([]bpf.RawInstruction, error) {
	if port == 0 {
		return nil, fmt.Errorf("pcap: filter: the listener's port is 0")
	}
	p := uint32(port)
	// Jump offsets count instructions after the jump; the labels in the
	// comments give the targets.
	prog := []bpf.Instruction{
		/* 0 */ bpf.LoadExtension{Num: bpf.ExtType},
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: packetOutgoing, SkipTrue: 2},
		/* 2 */ bpf.LoadExtension{Num: bpf.ExtLinkLayerType},
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: arphrdLoopback, SkipTrue: 23}, // drop
		/* 4 */ bpf.LoadExtension{Num: bpf.ExtProto},
		/* 5 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeIPv4, SkipTrue: 2},
		/* 6 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeIPv6, SkipTrue: 13},
		/* 7 */ bpf.RetConstant{Val: SnapLen},
		// IPv4 (8)
		/* 8 */ bpf.LoadAbsolute{Off: skfNetOff + 9, Size: 1},
		/* 9 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: ipProtoTCP, SkipTrue: 16}, // accept
		/* 10 */ bpf.LoadAbsolute{Off: skfNetOff + 6, Size: 2},
		/* 11 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: ipv4FragMask, SkipTrue: 14}, // accept: a fragment has no ports
		/* 12 */ bpf.LoadAbsolute{Off: skfNetOff + 0, Size: 1},
		/* 13 */ bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x0f},
		/* 14 */ bpf.ALUOpConstant{Op: bpf.ALUOpShiftLeft, Val: 2},
		/* 15 */ bpf.TAX{},
		/* 16 */ bpf.LoadIndirect{Off: skfNetOff + 0, Size: 2},
		/* 17 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: p, SkipTrue: 9}, // drop
		/* 18 */ bpf.LoadIndirect{Off: skfNetOff + 2, Size: 2},
		/* 19 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: p, SkipTrue: 7, SkipFalse: 6}, // drop : accept
		// IPv6 (20)
		/* 20 */ bpf.LoadAbsolute{Off: skfNetOff + 6, Size: 1},
		/* 21 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: ipProtoTCP, SkipTrue: 4}, // accept
		/* 22 */ bpf.LoadAbsolute{Off: skfNetOff + ipv6HeaderLength, Size: 2},
		/* 23 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: p, SkipTrue: 3}, // drop
		/* 24 */ bpf.LoadAbsolute{Off: skfNetOff + ipv6HeaderLength + 2, Size: 2},
		/* 25 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: p, SkipTrue: 1}, // drop
		/* 26 */ bpf.RetConstant{Val: SnapLen}, // accept
		/* 27 */ bpf.RetConstant{Val: 0}, // drop
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("pcap: assemble the capture filter: %w", err)
	}
	return raw, nil
}

// idleFilter is the socket's filter while no session is attached: it
// accepts no packet, so nothing is copied to the ring (engine_linux.go).
// (bpf.RetConstant assembles without error: it has no operand to check.)
var idleFilter = func() []bpf.RawInstruction {
	ret, _ := bpf.RetConstant{Val: 0}.Assemble()
	return []bpf.RawInstruction{ret}
}()
