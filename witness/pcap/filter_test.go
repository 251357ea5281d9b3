package pcap

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
)

// The capture filter runs in the kernel; these tests run it over crafted
// packets with runFilter, a model of the kernel's classic BPF for the
// instructions the filter uses (filter_kernel_linux_test.go runs the same
// packets through the kernel itself, where the test may).
//
// Equivalent mutants (gremlins): filter.go:65:44 and 69:44 `skfNetOff + 0`
// -> `skfNetOff - 0`, the same constant.

// filterPacket is what the filter sees of a packet: the kernel's packet
// type, the interface's hardware type and the frame's protocol, and the
// frame from its link-layer header on, its network header at netOff.
type filterPacket struct {
	pktType, hatype, proto uint32
	frame                  []byte
	netOff                 int
}

// The kernel's SKF_LL_OFF (-0x200000): a load at skfLLOff+k reads byte k
// of the link-layer header.
const skfLLOff = 0xFFE00000

// runFilter returns what the filter returns for p: the bytes kept, 0 for
// a packet dropped. Loads are big-endian; one past the packet's end ends
// the program with 0, as in the kernel (bpf_internal_load_pointer_neg_helper
// for the negative offsets).
func runFilter(t *testing.T, prog []bpf.RawInstruction, p filterPacket) uint32 {
	t.Helper()
	insts, ok := bpf.Disassemble(prog)
	if !ok {
		t.Fatalf("the filter has instructions the model does not decode: %v", insts)
	}
	load := func(k uint32, size int) (uint32, bool) {
		var off int
		switch {
		case k >= skfNetOff:
			off = p.netOff + int(k-skfNetOff)
		case k >= skfLLOff:
			off = int(k - skfLLOff) // the link-layer header is the frame's start
		case k < 0x80000000:
			off = int(k)
		default:
			return 0, false
		}
		if off+size > len(p.frame) {
			return 0, false
		}
		b := p.frame[off : off+size]
		switch size {
		case 1:
			return uint32(b[0]), true
		case 2:
			return uint32(binary.BigEndian.Uint16(b)), true
		}
		return binary.BigEndian.Uint32(b), true
	}
	var a, x uint32
	for pc := 0; pc < len(insts); pc++ {
		switch ins := insts[pc].(type) {
		case bpf.LoadExtension:
			switch ins.Num {
			case bpf.ExtType:
				a = p.pktType
			case bpf.ExtLinkLayerType:
				a = p.hatype
			case bpf.ExtProto:
				a = p.proto
			default:
				t.Fatalf("instruction %d: extension %d is not modelled", pc, ins.Num)
			}
		case bpf.LoadAbsolute:
			v, ok := load(ins.Off, ins.Size)
			if !ok {
				return 0
			}
			a = v
		case bpf.LoadIndirect:
			v, ok := load(x+ins.Off, ins.Size)
			if !ok {
				return 0
			}
			a = v
		case bpf.ALUOpConstant:
			switch ins.Op {
			case bpf.ALUOpAnd:
				a &= ins.Val
			case bpf.ALUOpShiftLeft:
				a <<= ins.Val
			default:
				t.Fatalf("instruction %d: ALU operation %d is not modelled", pc, ins.Op)
			}
		case bpf.TAX:
			x = a
		case bpf.JumpIf:
			var cond bool
			switch ins.Cond {
			case bpf.JumpEqual:
				cond = a == ins.Val
			case bpf.JumpNotEqual:
				cond = a != ins.Val
			case bpf.JumpBitsSet:
				cond = a&ins.Val != 0
			default:
				t.Fatalf("instruction %d: jump condition %d is not modelled", pc, ins.Cond)
			}
			if cond {
				pc += int(ins.SkipTrue)
			} else {
				pc += int(ins.SkipFalse)
			}
		case bpf.RetConstant:
			return ins.Val
		default:
			t.Fatalf("instruction %d: %T is not modelled", pc, ins)
		}
	}
	t.Fatal("the filter ran past its last instruction")
	return 0
}

const (
	testListenPort = 22
	pktHost        = 0 // PACKET_HOST
	arphrdEther    = 1
	arphrdNone     = 0xfffe
)

// ethernet is an Ethernet frame to lo's address (00:00:00:00:00:00,
// so the kernel takes it as the host's) around payload.
func ethernet(etherType uint16, payload []byte) []byte {
	f := make([]byte, 14, 14+len(payload))
	binary.BigEndian.PutUint16(f[12:], etherType)
	return append(f, payload...)
}

// ipv4 is an IPv4 header with ihl 32-bit words (options zero), protocol
// proto and flags and fragment offset frag, from 10.231.1.1 to 10.231.1.2,
// followed by l4.
func ipv4(ihl int, proto byte, frag uint16, l4 []byte) []byte {
	h := make([]byte, ihl*4)
	h[0] = 0x40 | byte(ihl)
	binary.BigEndian.PutUint16(h[2:], uint16(len(h)+len(l4)))
	binary.BigEndian.PutUint16(h[6:], frag)
	h[8], h[9] = 64, proto
	copy(h[12:], []byte{10, 231, 1, 1, 10, 231, 1, 2})
	return append(h, l4...)
}

// ipv6 is an IPv6 header with next header next, from fd00::1 to fd00::2,
// followed by l4.
func ipv6(next byte, l4 []byte) []byte {
	h := make([]byte, ipv6HeaderLength)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(l4)))
	h[6], h[7] = next, 64
	h[8], h[23] = 0xfd, 1
	h[24], h[39] = 0xfd, 2
	return append(h, l4...)
}

// ports is the start of a TCP or UDP header, from src to dst, padded to
// 20 bytes.
func ports(src, dst uint16) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b, src)
	binary.BigEndian.PutUint16(b[2:], dst)
	return b
}

// filterCase is a crafted packet and whether the filter keeps it.
type filterCase struct {
	name   string
	p      filterPacket
	accept bool
}

// onLoopback is an Ethernet frame as the kernel hands a loopback packet
// to a packet socket on its way in.
func onLoopback(etherType uint16, payload []byte) filterPacket {
	return filterPacket{pktType: pktHost, hatype: arphrdLoopback, proto: uint32(etherType), frame: ethernet(etherType, payload), netOff: 14}
}

// filterCases are the packets the examiner relies on the filter for:
// the SSH listener's own segments are not in the capture, in IPv4 (with
// or without options) and IPv6, either direction; everything else is,
// TCP on other ports, UDP, a fragment whose bytes where ports would be
// happen to match, non-IP frames. The addresses' last bytes are not the
// port, so a port read from the wrong place does not match by chance.
func filterCases() []filterCase {
	const udp, tcp = 17, ipProtoTCP
	return []filterCase{
		{"IPv4 UDP", onLoopback(etherTypeIPv4, ipv4(5, udp, 0, ports(40000, testListenPort))), true},
		{"IPv4 TCP, other ports", onLoopback(etherTypeIPv4, ipv4(5, tcp, 0, ports(40000, 80))), true},
		{"IPv4 TCP to the listener", onLoopback(etherTypeIPv4, ipv4(5, tcp, 0, ports(40000, testListenPort))), false},
		{"IPv4 TCP from the listener", onLoopback(etherTypeIPv4, ipv4(5, tcp, 0, ports(testListenPort, 40000))), false},
		{"IPv4 with options, TCP to the listener", onLoopback(etherTypeIPv4, ipv4(6, tcp, 0, ports(40000, testListenPort))), false},
		{"IPv4 with options, TCP on other ports", onLoopback(etherTypeIPv4, ipv4(6, tcp, 0, ports(40000, 80))), true},
		{"IPv4 first fragment (more fragments), TCP to the listener", onLoopback(etherTypeIPv4, ipv4(5, tcp, 0x2000, ports(40000, testListenPort))), false},
		{"IPv4 later fragment of TCP, listener's port where ports would be", onLoopback(etherTypeIPv4, ipv4(5, tcp, 0x0001, ports(testListenPort, testListenPort))), true},
		{"IPv6 UDP", onLoopback(etherTypeIPv6, ipv6(udp, ports(40000, testListenPort))), true},
		{"IPv6 TCP, other ports", onLoopback(etherTypeIPv6, ipv6(tcp, ports(40000, 80))), true},
		{"IPv6 TCP to the listener", onLoopback(etherTypeIPv6, ipv6(tcp, ports(40000, testListenPort))), false},
		{"IPv6 TCP from the listener", onLoopback(etherTypeIPv6, ipv6(tcp, ports(testListenPort, 40000))), false},
		{"ARP", onLoopback(0x0806, make([]byte, 28)), true},
	}
}

// TestFilterVerdicts: the filter keeps every packet but the SSH
// listener's own TCP segments and loopback's outgoing copies, and keeps
// at most SnapLen of each; on an interface without a link-layer header
// (a tun) it reads the same network header.
func TestFilterVerdicts(t *testing.T) {
	prog, err := listenerFilter(testListenPort)
	if err != nil {
		t.Fatal(err)
	}
	cases := filterCases()
	udp := ipv4(5, 17, 0, ports(40000, 80))
	tcpToListener := ipv4(5, ipProtoTCP, 0, ports(40000, testListenPort))
	cases = append(cases,
		filterCase{"loopback's outgoing copy", filterPacket{pktType: packetOutgoing, hatype: arphrdLoopback, proto: etherTypeIPv4, frame: ethernet(etherTypeIPv4, udp), netOff: 14}, false},
		filterCase{"an outgoing packet on Ethernet", filterPacket{pktType: packetOutgoing, hatype: arphrdEther, proto: etherTypeIPv4, frame: ethernet(etherTypeIPv4, udp), netOff: 14}, true},
		filterCase{"a tun's IPv4 UDP", filterPacket{pktType: pktHost, hatype: arphrdNone, proto: etherTypeIPv4, frame: udp}, true},
		filterCase{"a tun's IPv4 TCP to the listener", filterPacket{pktType: pktHost, hatype: arphrdNone, proto: etherTypeIPv4, frame: tcpToListener}, false},
	)
	for _, c := range cases {
		want := uint32(0)
		if c.accept {
			want = SnapLen
		}
		if got := runFilter(t, prog, c.p); got != want {
			t.Errorf("%s: the filter returns %d, want %d", c.name, got, want)
		}
	}
}

// TestIdleFilterKeepsNothing: while no session is open the socket's
// filter keeps no packet, whatever it is.
func TestIdleFilterKeepsNothing(t *testing.T) {
	for _, c := range filterCases() {
		if got := runFilter(t, idleFilter, c.p); got != 0 {
			t.Errorf("%s: the idle filter returns %d, want 0", c.name, got)
		}
	}
}
