// Package pcapng reads back the pcapng files the packet witness writes
// (witness/pcap), the one reader the project has for them. A capture
// folder's files are hostile when read back, so no length field is
// trusted: snap and capture lengths are capped at the writer's snap
// length, block sizes, interface blocks per section and options per
// block are bounded, and a block cut short is an error naming its
// offset, never a clean end. Whatever a file says, the reader holds at
// most one block (MaxBlock) and a section's interfaces (MaxInterfaces
// of at most MaxNameBytes each).
//
// The blocks read are the ones the writer writes (section header,
// interface description, enhanced packet) and the standard ones a
// reader may meet beside them: simple packet blocks are packets, and
// statistics, name resolution, secrets and custom blocks are skipped.
// Any other block type is an error: a packet hidden in a block the
// reader does not know would be a packet that evidence does not count.
package pcapng

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"time"
)

// The bounds. The writer (witness/pcap) writes three options to a section header and
// three to an interface block, none to a packet, and names of Linux
// interfaces (at most 15 bytes); these leave a wide margin and still
// keep a hostile file small to read.
const (
	// SnapLen is the packet witness's snap length, the most of a packet
	// it keeps and so the most a packet of its files may hold: the bound
	// its files are read back with. It is tcpdump's default, which holds
	// a 64 KiB GSO/GRO super-frame with its headers and is the largest
	// that Wireshark reads without complaint.
	SnapLen = 262144
	// MaxInterfaces is the most interface blocks one section may hold.
	// The writer writes one per interface a packet arrived on, and a
	// lab's network namespace has a handful.
	MaxInterfaces = 1024
	// MaxOptions is the most options one block may carry.
	MaxOptions = 64
	// MaxOptionBytes is the most bytes a block's options may take.
	MaxOptionBytes = 4096
	// MaxNameBytes is the longest interface name kept.
	MaxNameBytes = 256
)

// Errors wraps one of these, so a caller can tell what kind of wrong it met.
var (
	// ErrTruncated: the file ends inside a block.
	ErrTruncated = errors.New("truncated")
	// ErrBound: a length or count is past one of the reader's bounds.
	ErrBound = errors.New("past the bound")
	// ErrMalformed: the bytes are not a block the format allows.
	ErrMalformed = errors.New("malformed")
)

// Error is what is wrong with a file and where: the offset of the block
// it is in.
type Error struct {
	Offset int64  // of the block's first byte
	Block  string // the block's kind
	Kind   error  // ErrTruncated, ErrBound or ErrMalformed
	What   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("pcapng: %s at offset %d: %s: %s", e.Block, e.Offset, e.Kind, e.What)
}

func (e *Error) Unwrap() error { return e.Kind }

// Block types (pcapng specification, section 11.1).
const (
	typeSectionHeader = 0x0A0D0D0A
	typeInterface     = 0x00000001
	typeObsoletePkt   = 0x00000002
	typeSimplePacket  = 0x00000003
	typeNameRes       = 0x00000004
	typeStatistics    = 0x00000005
	typeEnhanced      = 0x00000006
	typeSecrets       = 0x0000000A
	typeCustom        = 0x00000BAD
	typeCustomNoCopy  = 0x40000BAD

	byteOrderMagic = 0x1A2B3C4D
)

// Option codes read.
const (
	optEnd      = 0
	optIfName   = 2
	optTSResol  = 9
	optTSOffset = 14
)

func blockName(typ uint32) string {
	switch typ {
	case typeSectionHeader:
		return "section header block"
	case typeInterface:
		return "interface description block"
	case typeEnhanced:
		return "enhanced packet block"
	case typeSimplePacket:
		return "simple packet block"
	case typeStatistics:
		return "interface statistics block"
	case typeNameRes:
		return "name resolution block"
	}
	return fmt.Sprintf("block of type 0x%08x", typ)
}

// Interface is what an interface description block says.
type Interface struct {
	LinkType uint16
	SnapLen  uint32
	Name     string
	// tsBinary and tsExp are the timestamp unit: 10^-tsExp seconds,
	// or 2^-tsExp when tsBinary; tsOffset is seconds added.
	tsBinary bool
	tsExp    uint8
	tsOffset int64
}

// Packet is one packet read. Data is the reader's buffer: it is valid
// until the next call to Next.
type Packet struct {
	InterfaceID int       // index among the section's interfaces
	Interface   Interface // that interface: its link type says how Data begins
	Time        time.Time
	Length      uint32 // the packet's length on the wire
	Data        []byte // the bytes captured
}

// Reader reads the packets of a pcapng file.
type Reader struct {
	r       io.Reader
	snapLen uint32
	order   binary.ByteOrder // the current section's
	ifaces  []Interface      // the current section's
	off     int64            // of the next block
	hdr     [12]byte
	buf     []byte
}

// MaxBlock is the largest block a reader with snap length snapLen
// accepts: an enhanced packet block holding snapLen bytes and the most
// options allowed.
func MaxBlock(snapLen uint32) uint32 {
	return 32 + (snapLen+3)&^3 + MaxOptionBytes
}

// NewReader reads the section header that begins a pcapng file; snapLen
// is the most bytes of a packet any of its interfaces may hold (the
// writer's snap length), at most 1 GiB.
func NewReader(r io.Reader, snapLen uint32) (*Reader, error) {
	if snapLen == 0 || snapLen > 1<<30 {
		return nil, fmt.Errorf("pcapng: snap length bound %d is not in 1..%d", snapLen, 1<<30)
	}
	rd := &Reader{r: r, snapLen: snapLen}
	typ, body, err := rd.block()
	if err == io.EOF {
		return nil, &Error{Offset: 0, Block: "file", Kind: ErrTruncated, What: "empty: no section header block"}
	}
	if err != nil {
		return nil, err
	}
	if typ != typeSectionHeader {
		return nil, &Error{Offset: 0, Block: blockName(typ), Kind: ErrMalformed, What: "a pcapng file begins with a section header block"}
	}
	if err := rd.section(0, body); err != nil {
		return nil, err
	}
	return rd, nil
}

// Next returns the next packet; io.EOF when the file ends where a block
// could begin, any other error when it does not or a block is wrong.
func (r *Reader) Next() (Packet, error) {
	for {
		at := r.off
		typ, body, err := r.block()
		if err != nil {
			return Packet{}, err
		}
		bad := func(kind error, format string, args ...any) error {
			return &Error{Offset: at, Block: blockName(typ), Kind: kind, What: fmt.Sprintf(format, args...)}
		}
		switch typ {
		case typeSectionHeader:
			if err := r.section(at, body); err != nil {
				return Packet{}, err
			}
		case typeInterface:
			if err := r.addInterface(at, body); err != nil {
				return Packet{}, err
			}
		case typeEnhanced:
			return r.enhanced(body, bad)
		case typeSimplePacket:
			return r.simple(body, bad)
		case typeStatistics, typeNameRes, typeSecrets, typeCustom, typeCustomNoCopy:
			// Nothing counted is in them; their size was bounded.
		case typeObsoletePkt:
			return Packet{}, bad(ErrMalformed, "obsolete packet blocks are not read")
		default:
			return Packet{}, bad(ErrMalformed, "not a block type the packet witness's files hold")
		}
	}
}

// Count counts the packets of a pcapng file, reading it to its end.
func Count(r io.Reader, snapLen uint32) (int64, error) {
	rd, err := NewReader(r, snapLen)
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		_, err := rd.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// block reads the next block whole, checking its lengths, and returns
// its type and body (between the length and the trailing length); io.EOF
// when the file ends before its first byte.
func (r *Reader) block() (uint32, []byte, error) {
	at := r.off
	hdr := r.hdr[:8]
	n, err := io.ReadFull(r.r, hdr)
	if err == io.EOF {
		return 0, nil, io.EOF
	}
	truncated := func(block string, what string, args ...any) error {
		return &Error{Offset: at, Block: block, Kind: ErrTruncated, What: fmt.Sprintf(what, args...)}
	}
	if err == io.ErrUnexpectedEOF {
		return 0, nil, truncated("block", "the file ends %d bytes into the block's 8-byte header", n)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("pcapng: read block at offset %d: %w", at, err)
	}
	// The section header's type reads the same in either byte order; its
	// byte-order magic, just after the length, says which the section
	// uses, the length included.
	typ := binary.LittleEndian.Uint32(hdr[0:4])
	head := 8
	if typ == typeSectionHeader {
		m, err := io.ReadFull(r.r, r.hdr[8:12])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return 0, nil, truncated(blockName(typ), "the file ends %d bytes into the block's 12-byte header", 8+m)
		}
		if err != nil {
			return 0, nil, fmt.Errorf("pcapng: read block at offset %d: %w", at, err)
		}
		switch {
		case binary.LittleEndian.Uint32(r.hdr[8:12]) == byteOrderMagic:
			r.order = binary.LittleEndian
		case binary.BigEndian.Uint32(r.hdr[8:12]) == byteOrderMagic:
			r.order = binary.BigEndian
		default:
			return 0, nil, &Error{Offset: at, Block: blockName(typ), Kind: ErrMalformed, What: fmt.Sprintf("byte-order magic 0x%08x is not 0x1a2b3c4d in either order", binary.LittleEndian.Uint32(r.hdr[8:12]))}
		}
		head = 12
	} else if r.order == nil {
		return typ, nil, nil // NewReader names it
	} else {
		typ = r.order.Uint32(hdr[0:4])
	}
	name := blockName(typ)
	length := r.order.Uint32(hdr[4:8])
	if length < uint32(head)+4 || length%4 != 0 {
		return 0, nil, &Error{Offset: at, Block: name, Kind: ErrMalformed, What: fmt.Sprintf("block length %d is not a multiple of 4 of at least %d", length, head+4)}
	}
	if bound := r.blockBound(typ); length > bound {
		return 0, nil, &Error{Offset: at, Block: name, Kind: ErrBound, What: fmt.Sprintf("block length %d is past the bound of %d bytes", length, bound)}
	}
	// body holds what follows the length, the trailing length included.
	size := int(length) - 8
	if cap(r.buf) < size {
		// Doubling: packets growing one by one cost a few allocations,
		// not one each; never past the block bound.
		r.buf = make([]byte, min(max(size, 2*cap(r.buf), 4096), int(MaxBlock(r.snapLen))))
	}
	body := r.buf[:size]
	copy(body, r.hdr[8:head])
	if m, err := io.ReadFull(r.r, body[head-8:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return 0, nil, truncated(name, "the file ends %d bytes into a block of %d", head+m, length)
		}
		return 0, nil, fmt.Errorf("pcapng: read %s at offset %d: %w", name, at, err)
	}
	if trailer := r.order.Uint32(body[size-4:]); trailer != length {
		return 0, nil, &Error{Offset: at, Block: name, Kind: ErrMalformed, What: fmt.Sprintf("trailing length %d does not match the block length %d", trailer, length)}
	}
	r.off += int64(length)
	return typ, body[:size-4], nil
}

// blockBound is the largest block of type typ accepted: packets hold at
// most a snap length, the other blocks a fixed part and options.
func (r *Reader) blockBound(typ uint32) uint32 {
	switch typ {
	case typeEnhanced, typeSimplePacket:
		return MaxBlock(r.snapLen)
	case typeSectionHeader, typeInterface, typeStatistics:
		return 32 + MaxOptionBytes
	}
	return 8 + MaxOptionBytes + 4 // the skipped kinds
}

// section starts a new section: its interfaces are its own.
func (r *Reader) section(at int64, body []byte) error {
	bad := func(kind error, what string, args ...any) error {
		return &Error{Offset: at, Block: blockName(typeSectionHeader), Kind: kind, What: fmt.Sprintf(what, args...)}
	}
	if len(body) < 16 {
		return bad(ErrMalformed, "%d bytes are fewer than the 16 a section header's fields take", len(body))
	}
	if major := r.order.Uint16(body[4:6]); major != 1 {
		return bad(ErrMalformed, "major version %d is not 1", major)
	}
	r.ifaces = r.ifaces[:0]
	return r.options(body[16:], bad, nil)
}

// addInterface adds the interface an interface description block
// describes to the section's.
func (r *Reader) addInterface(at int64, body []byte) error {
	bad := func(kind error, what string, args ...any) error {
		return &Error{Offset: at, Block: blockName(typeInterface), Kind: kind, What: fmt.Sprintf(what, args...)}
	}
	if len(r.ifaces) >= MaxInterfaces {
		return bad(ErrBound, "the section already holds %d interfaces, the most read", MaxInterfaces)
	}
	if len(body) < 8 {
		return bad(ErrMalformed, "%d bytes are fewer than the 8 an interface's fields take", len(body))
	}
	ifc := Interface{LinkType: r.order.Uint16(body[0:2]), SnapLen: r.order.Uint32(body[4:8]), tsExp: 6}
	// A snap length of 0 means no limit, which no file of the writer's says.
	if ifc.SnapLen == 0 || ifc.SnapLen > r.snapLen {
		return bad(ErrBound, "snap length %d is not in 1..%d, the writer's snap length", ifc.SnapLen, r.snapLen)
	}
	err := r.options(body[8:], bad, func(code uint16, v []byte) error {
		switch code {
		case optIfName:
			if len(v) > MaxNameBytes {
				return bad(ErrBound, "interface name of %d bytes is longer than %d", len(v), MaxNameBytes)
			}
			ifc.Name = string(v)
		case optTSResol:
			if len(v) != 1 {
				return bad(ErrMalformed, "if_tsresol option of %d bytes, not 1", len(v))
			}
			ifc.tsBinary, ifc.tsExp = v[0]&0x80 != 0, v[0]&0x7f
			if ifc.tsBinary && ifc.tsExp > 63 || !ifc.tsBinary && ifc.tsExp > 19 {
				return bad(ErrMalformed, "if_tsresol 0x%02x is finer than a 64-bit timestamp can count", v[0])
			}
		case optTSOffset:
			if len(v) != 8 {
				return bad(ErrMalformed, "if_tsoffset option of %d bytes, not 8", len(v))
			}
			ifc.tsOffset = int64(r.order.Uint64(v))
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.ifaces = append(r.ifaces, ifc)
	return nil
}

// enhanced returns the packet of an enhanced packet block.
func (r *Reader) enhanced(body []byte, bad func(error, string, ...any) error) (Packet, error) {
	if len(body) < 20 {
		return Packet{}, bad(ErrMalformed, "%d bytes are fewer than the 20 a packet's fields take", len(body))
	}
	id := r.order.Uint32(body[0:4])
	if id >= uint32(len(r.ifaces)) {
		return Packet{}, bad(ErrMalformed, "interface id %d; the section has %d interfaces", id, len(r.ifaces))
	}
	ifc := &r.ifaces[id]
	capLen, origLen := r.order.Uint32(body[12:16]), r.order.Uint32(body[16:20])
	if capLen > ifc.SnapLen {
		return Packet{}, bad(ErrBound, "capture length %d is past interface %d's snap length %d", capLen, id, ifc.SnapLen)
	}
	padded := int(capLen+3) &^ 3
	if padded > len(body)-20 {
		return Packet{}, bad(ErrMalformed, "capture length %d is past the block's %d bytes of packet data", capLen, len(body)-20)
	}
	if err := r.options(body[20+padded:], bad, nil); err != nil {
		return Packet{}, err
	}
	units := uint64(r.order.Uint32(body[4:8]))<<32 | uint64(r.order.Uint32(body[8:12]))
	return Packet{InterfaceID: int(id), Interface: *ifc, Time: ifc.time(units), Length: origLen, Data: body[20 : 20+capLen]}, nil
}

// simple returns the packet of a simple packet block: interface 0's,
// without a timestamp, cut at its snap length.
func (r *Reader) simple(body []byte, bad func(error, string, ...any) error) (Packet, error) {
	if len(r.ifaces) == 0 {
		return Packet{}, bad(ErrMalformed, "simple packet in a section with no interface")
	}
	if len(body) < 4 {
		return Packet{}, bad(ErrMalformed, "%d bytes are fewer than the 4 a simple packet's length takes", len(body))
	}
	origLen := r.order.Uint32(body[0:4])
	capLen := min(origLen, r.ifaces[0].SnapLen)
	if int(capLen) > len(body)-4 {
		return Packet{}, bad(ErrMalformed, "packet length %d is past the block's %d bytes of packet data", capLen, len(body)-4)
	}
	return Packet{InterfaceID: 0, Interface: r.ifaces[0], Length: origLen, Data: body[4 : 4+capLen]}, nil
}

// options walks the options of a block, handing each to fn (when not
// nil), within MaxOptions and MaxOptionBytes.
func (r *Reader) options(b []byte, bad func(error, string, ...any) error, fn func(code uint16, v []byte) error) error {
	if len(b) > MaxOptionBytes {
		return bad(ErrBound, "%d bytes of options are more than %d", len(b), MaxOptionBytes)
	}
	for n := 0; len(b) > 0; n++ {
		if len(b) < 4 {
			return bad(ErrMalformed, "%d bytes left where an option's 4-byte header begins", len(b))
		}
		code, l := r.order.Uint16(b[0:2]), int(r.order.Uint16(b[2:4]))
		if code == optEnd {
			return nil
		}
		if n >= MaxOptions {
			return bad(ErrBound, "more than %d options", MaxOptions)
		}
		padded := (l + 3) &^ 3
		if padded > len(b)-4 {
			return bad(ErrMalformed, "option %d declares %d bytes; %d are left in the block", code, l, len(b)-4)
		}
		if fn != nil {
			if err := fn(code, b[4:4+l]); err != nil {
				return err
			}
		}
		b = b[4+padded:]
	}
	return nil
}

var pow10 = [20]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

// time converts a timestamp in the interface's units.
func (ifc *Interface) time(units uint64) time.Time {
	var sec, nsec uint64
	e := uint(ifc.tsExp)
	switch {
	case ifc.tsBinary && e == 0:
		sec = units
	case ifc.tsBinary:
		sec, frac := units>>e, units&(1<<e-1)
		hi, lo := bits.Mul64(frac, 1e9)
		nsec = hi<<(64-e) | lo>>e
		return time.Unix(int64(sec)+ifc.tsOffset, int64(nsec))
	case e <= 9:
		sec, nsec = units/pow10[e], units%pow10[e]*pow10[9-e]
	default:
		sec, nsec = units/pow10[e], units%pow10[e]/pow10[e-9]
	}
	return time.Unix(int64(sec)+ifc.tsOffset, int64(nsec))
}
