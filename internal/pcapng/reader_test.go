package pcapng

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// snap is the bound the project reads its files with.
const snap = SnapLen

// Block builders, little-endian unless a test says otherwise.

func opt(code uint16, v []byte) []byte {
	b := binary.LittleEndian.AppendUint16(nil, code)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	return append(b, make([]byte, (4-len(v)%4)%4)...)
}

func endOpt() []byte { return make([]byte, 4) }

func block(typ uint32, body ...[]byte) []byte {
	var all []byte
	for _, p := range body {
		all = append(all, p...)
	}
	all = append(all, make([]byte, (4-len(all)%4)%4)...)
	n := uint32(12 + len(all))
	b := binary.LittleEndian.AppendUint32(nil, typ)
	b = binary.LittleEndian.AppendUint32(b, n)
	b = append(b, all...)
	return binary.LittleEndian.AppendUint32(b, n)
}

func shb(opts ...[]byte) []byte {
	f := binary.LittleEndian.AppendUint32(nil, byteOrderMagic)
	f = binary.LittleEndian.AppendUint16(f, 1)
	f = binary.LittleEndian.AppendUint16(f, 0)
	f = binary.LittleEndian.AppendUint64(f, ^uint64(0))
	return block(typeSectionHeader, append([][]byte{f}, opts...)...)
}

func idb(link uint16, snapLen uint32, opts ...[]byte) []byte {
	f := binary.LittleEndian.AppendUint16(nil, link)
	f = binary.LittleEndian.AppendUint16(f, 0)
	f = binary.LittleEndian.AppendUint32(f, snapLen)
	return block(typeInterface, append([][]byte{f}, opts...)...)
}

func epbFields(id uint32, ts uint64, capLen, origLen uint32) []byte {
	f := binary.LittleEndian.AppendUint32(nil, id)
	f = binary.LittleEndian.AppendUint32(f, uint32(ts>>32))
	f = binary.LittleEndian.AppendUint32(f, uint32(ts))
	f = binary.LittleEndian.AppendUint32(f, capLen)
	return binary.LittleEndian.AppendUint32(f, origLen)
}

func epb(id uint32, ts uint64, data []byte, origLen uint32, opts ...[]byte) []byte {
	return block(typeEnhanced, append([][]byte{epbFields(id, ts, uint32(len(data)), origLen), data, make([]byte, (4-len(data)%4)%4)}, opts...)...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// allocated is the heap bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// readAll reads every packet of a file, copying each.
func readAll(r io.Reader) ([]Packet, *Reader, error) {
	rd, err := NewReader(r, snap)
	if err != nil {
		return nil, nil, err
	}
	var out []Packet
	for {
		p, err := rd.Next()
		if err == io.EOF {
			return out, rd, nil
		}
		if err != nil {
			return out, rd, err
		}
		p.Data = bytes.Clone(p.Data)
		out = append(out, p)
	}
}

// TestReadsPacketsAndInterfaces: a well-formed file's packets, their
// interfaces, lengths and timestamps, across two sections (the second
// big-endian, with interfaces of its own) and blocks that are skipped.
func TestReadsPacketsAndInterfaces(t *testing.T) {
	ts := uint64(time.Date(2026, 12, 2, 8, 0, 0, 123456789, time.UTC).UnixNano())
	nine := opt(optTSResol, []byte{9})
	be := func(b []byte) []byte { // a big-endian section: header and a µs interface
		f := binary.BigEndian.AppendUint32(nil, byteOrderMagic)
		f = binary.BigEndian.AppendUint16(f, 1)
		f = binary.BigEndian.AppendUint16(f, 0)
		f = binary.BigEndian.AppendUint64(f, ^uint64(0))
		sh := binary.BigEndian.AppendUint32(nil, typeSectionHeader)
		sh = binary.BigEndian.AppendUint32(sh, uint32(12+len(f)))
		sh = append(append(sh, f...), binary.BigEndian.AppendUint32(nil, uint32(12+len(f)))...)
		ib := binary.BigEndian.AppendUint32(nil, typeInterface)
		ib = binary.BigEndian.AppendUint32(ib, 20)
		ib = binary.BigEndian.AppendUint16(ib, 101)
		ib = binary.BigEndian.AppendUint16(ib, 0)
		ib = binary.BigEndian.AppendUint32(ib, 100)
		ib = binary.BigEndian.AppendUint32(ib, 20)
		eb := binary.BigEndian.AppendUint32(nil, typeEnhanced)
		eb = binary.BigEndian.AppendUint32(eb, uint32(32+len(b)))
		eb = binary.BigEndian.AppendUint32(eb, 0)
		eb = binary.BigEndian.AppendUint32(eb, 0)
		eb = binary.BigEndian.AppendUint32(eb, 1_500_000) // 1.5 s in µs
		eb = binary.BigEndian.AppendUint32(eb, uint32(len(b)))
		eb = binary.BigEndian.AppendUint32(eb, 60)
		eb = append(append(eb, b...), binary.BigEndian.AppendUint32(nil, uint32(32+len(b)))...)
		return cat(sh, ib, eb)
	}
	file := cat(
		shb(opt(4, []byte("aptl-kali-capture")), endOpt()),
		idb(1, snap, opt(optIfName, []byte("lo")), nine, endOpt()),
		epb(0, ts, []byte("abc"), 3),
		idb(101, snap, opt(optIfName, []byte("eth0")), nine),
		block(typeStatistics, make([]byte, 12)),
		epb(1, ts+1, make([]byte, snap), snap+10),
		epb(0, ts+2, nil, 0),
		be([]byte("wxyz")),
	)
	for _, r := range []io.Reader{bytes.NewReader(file), iotest.OneByteReader(bytes.NewReader(file))} {
		got, rd, err := readAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 {
			t.Fatalf("%d packets, want 4", len(got))
		}
		want := []struct {
			id      int
			capLen  int
			origLen uint32
			at      time.Time
		}{
			{0, 3, 3, time.Unix(0, int64(ts))},
			{1, snap, snap + 10, time.Unix(0, int64(ts+1))},
			{0, 0, 0, time.Unix(0, int64(ts+2))},
			{0, 4, 60, time.Unix(1, 500_000_000)},
		}
		for i, w := range want {
			p := got[i]
			if p.InterfaceID != w.id || len(p.Data) != w.capLen || p.Length != w.origLen || !p.Time.Equal(w.at) {
				t.Errorf("packet %d: interface %d, %d of %d bytes at %v; want %d, %d of %d at %v", i, p.InterfaceID, len(p.Data), p.Length, p.Time, w.id, w.capLen, w.origLen, w.at)
			}
		}
		if string(got[0].Data) != "abc" || string(got[3].Data) != "wxyz" {
			t.Errorf("packet data %q, %q", got[0].Data, got[3].Data)
		}
		// The second section's interfaces replaced the first's.
		if len(rd.ifaces) != 1 || rd.ifaces[0].LinkType != 101 || rd.ifaces[0].SnapLen != 100 {
			t.Errorf("interfaces of the last section: %+v, want one of link type 101, snap length 100", rd.ifaces)
		}
		if got[3].Interface.LinkType != 101 {
			t.Errorf("the last section's packet has link type %d, want its interface's 101", got[3].Interface.LinkType)
		}
	}
}

// TestTimestampUnits: if_tsresol in powers of ten and of two, and
// if_tsoffset.
func TestTimestampUnits(t *testing.T) {
	for _, c := range []struct {
		resol  byte
		offset int64
		units  uint64
		want   time.Time
	}{
		{6, 0, 1_000_001, time.Unix(1, 1000)},
		{9, 0, 2_000_000_007, time.Unix(2, 7)},
		{12, 0, 3_000_000_000_999, time.Unix(3, 0)},
		{19, 0, ^uint64(0), time.Unix(1, 844674407)},
		{0x80 | 1, 0, 3, time.Unix(1, 500_000_000)},
		{0x80 | 30, 0, 1<<30 + 1<<29, time.Unix(1, 500_000_000)},
		{0x80, 0, 7, time.Unix(7, 0)},
		{6, 100, 1, time.Unix(100, 1000)},
	} {
		opts := [][]byte{opt(optTSResol, []byte{c.resol})}
		if c.offset != 0 {
			opts = append(opts, opt(optTSOffset, binary.LittleEndian.AppendUint64(nil, uint64(c.offset))))
		}
		got, _, err := readAll(bytes.NewReader(cat(shb(), idb(1, snap, opts...), epb(0, c.units, nil, 0))))
		if err != nil {
			t.Fatalf("tsresol 0x%02x: %v", c.resol, err)
		}
		if !got[0].Time.Equal(c.want) {
			t.Errorf("tsresol 0x%02x offset %d: %d units are %v, want %v", c.resol, c.offset, c.units, got[0].Time, c.want)
		}
	}
}

// hostile is a file that must fail fast, with bounded memory, with an
// error of kind saying what.
type hostile struct {
	name   string
	file   []byte
	kind   error
	offset int64 // of the block the error names
	what   string
}

// hostileFiles are the crafted inputs: each is refused, none makes the
// reader allocate what its length fields declare.
func hostileFiles() []hostile {
	head := cat(shb(), idb(1, snap))
	at := int64(len(head))
	pkt := epb(0, 1, []byte("abcdefgh"), 8)
	manyIfaces := func(n int) []byte {
		one := idb(1, 1500)
		b := bytes.NewBuffer(shb())
		for range n {
			b.Write(one)
		}
		return b.Bytes()
	}
	optionBomb := func(n int) [][]byte { // n empty options: 4 bytes each
		o := make([][]byte, n)
		for i := range o {
			o[i] = opt(1, nil)
		}
		return o
	}
	// The largest packet block the bound lets through, cut after 64 bytes:
	// the reader's one block buffer is at its largest.
	largest := binary.LittleEndian.AppendUint32(nil, typeEnhanced)
	largest = binary.LittleEndian.AppendUint32(largest, MaxBlock(snap))
	largest = append(largest, epbFields(0, 1, snap, snap)...)
	largest = append(largest, make([]byte, 64)...)
	badTrailer := bytes.Clone(pkt)
	binary.LittleEndian.PutUint32(badTrailer[len(badTrailer)-4:], uint32(len(pkt))+4)
	longBlock := binary.LittleEndian.AppendUint32(nil, typeEnhanced)
	longBlock = binary.LittleEndian.AppendUint32(longBlock, 0xFFFFFFF0)
	longBlock = append(longBlock, make([]byte, 64)...)
	// The file: 144 bytes whose interface declares a snap length
	// of 0xFFFFFFF0, then a packet.
	crafted := cat(shb(opt(4, []byte("aptl-kali-capture")), opt(3, []byte("linux")), endOpt()),
		idb(1, 0xFFFFFFF0, opt(optIfName, []byte("lo")), opt(optTSResol, []byte{9}), endOpt()),
		epb(0, 1, make([]byte, 4), 4))
	return []hostile{
		{"crafted snap length", crafted, ErrBound, int64(len(shb(opt(4, []byte("aptl-kali-capture")), opt(3, []byte("linux")), endOpt()))), "snap length 4294967280 is not in 1..262144"},
		{"snap length 0", cat(shb(), idb(1, 0), pkt), ErrBound, int64(len(shb())), "snap length 0 is not in"},
		{"snap length past the writer's", cat(shb(), idb(1, snap+1), pkt), ErrBound, int64(len(shb())), "snap length 262145"},
		{"crafted capture length", cat(head, block(typeEnhanced, epbFields(0, 1, 0xFFFFFFF0, 0xFFFFFFF0), []byte("abcd"))), ErrBound, at, "capture length 4294967280 is past interface 0's snap length 262144"},
		{"capture length past the block", cat(head, block(typeEnhanced, epbFields(0, 1, 100, 100), []byte("abcd"))), ErrMalformed, at, "capture length 100 is past the block's 4 bytes"},
		{"capture length past the interface's snap length", cat(shb(), idb(1, 64), epb(0, 1, make([]byte, 65), 65)), ErrBound, int64(len(shb()) + len(idb(1, 64))), "capture length 65 is past interface 0's snap length 64"},
		{"crafted block length", cat(head, longBlock), ErrBound, at, "block length 4294967280 is past the bound of 266272 bytes"},
		{"block length not a multiple of 4", cat(head, pkt[:4], []byte{41, 0, 0, 0}, pkt[8:]), ErrMalformed, at, "block length 41 is not a multiple of 4"},
		{"truncated header", cat(head, pkt[:5]), ErrTruncated, at, "the file ends 5 bytes into the block's 8-byte header"},
		{"truncated section header", shb()[:10], ErrTruncated, 0, "the file ends 10 bytes into the block's 12-byte header"},
		{"truncated body", cat(head, pkt[:len(pkt)-9]), ErrTruncated, at, fmt.Sprintf("the file ends %d bytes into a block of %d", len(pkt)-9, len(pkt))},
		{"truncated trailer", cat(head, pkt[:len(pkt)-1]), ErrTruncated, at, fmt.Sprintf("the file ends %d bytes into a block of %d", len(pkt)-1, len(pkt))},
		{"truncated largest block", cat(head, largest[:64]), ErrTruncated, at, fmt.Sprintf("the file ends 64 bytes into a block of %d", MaxBlock(snap))},
		{"trailer length mismatch", cat(head, badTrailer), ErrMalformed, at, fmt.Sprintf("trailing length %d does not match the block length %d", len(pkt)+4, len(pkt))},
		{"200,000 interface blocks", manyIfaces(200_000), ErrBound, int64(len(shb()) + MaxInterfaces*len(idb(1, 1500))), "the section already holds 1024 interfaces"},
		{"option count bomb", cat(shb(), idb(1, snap, optionBomb(1000)...)), ErrBound, int64(len(shb())), "more than 64 options"},
		{"option bytes bomb in a packet", cat(head, epb(0, 1, []byte("x"), 1, opt(1, make([]byte, 65000)))), ErrBound, at, "65004 bytes of options are more than 4096"},
		{"option bytes bomb in an interface", cat(shb(), idb(1, snap, opt(1, make([]byte, 65000)))), ErrBound, int64(len(shb())), "block length 65024 is past the bound of 4128"},
		{"option length past the block", cat(shb(), block(typeInterface, binary.LittleEndian.AppendUint32([]byte{1, 0, 0, 0}, snap), []byte{2, 0, 0xff, 0xff})), ErrMalformed, int64(len(shb())), "option 2 declares 65535 bytes; 0 are left"},
		{"interface name too long", cat(shb(), idb(1, snap, opt(optIfName, make([]byte, 300)))), ErrBound, int64(len(shb())), "interface name of 300 bytes"},
		{"packet of no interface", cat(head, epb(7, 1, nil, 0)), ErrMalformed, at, "interface id 7; the section has 1 interfaces"},
		{"unknown block type", cat(head, block(0x77, nil)), ErrMalformed, at, "block of type 0x00000077"},
		{"no section header", cat(idb(1, snap), pkt), ErrMalformed, 0, "a pcapng file begins with a section header block"},
		{"bad byte-order magic", cat(shb()[:8], []byte{1, 2, 3, 4}, shb()[12:]), ErrMalformed, 0, "byte-order magic"},
		{"empty", nil, ErrTruncated, 0, "empty: no section header block"},
		{"timestamp resolution past 64 bits", cat(shb(), idb(1, snap, opt(optTSResol, []byte{20}))), ErrMalformed, int64(len(shb())), "if_tsresol 0x14"},
	}
}

// maxHostileAlloc is the most a hostile file may make the reader
// allocate: its largest block buffer (MaxBlock of the writer's snap
// length, 260 KiB) and a section's interfaces, with room to spare, and
// far below what any of the crafted length fields declares.
const maxHostileAlloc = 1 << 20

// TestHostileFilesFailFast: each crafted file is an error of the kind
// and at the offset the case names, saying what was wrong, and reading
// it allocates less than maxHostileAlloc.
func TestHostileFilesFailFast(t *testing.T) {
	if n := len(hostileFiles()[0].file); n != 144 {
		t.Fatalf("the crafted snap-length file is %d bytes; the issue's is 144", n)
	}
	for _, c := range hostileFiles() {
		t.Run(c.name, func(t *testing.T) {
			var n int64
			var err error
			alloc := allocated(func() { n, err = Count(bytes.NewReader(c.file), snap) })
			var pe *Error
			if !errors.As(err, &pe) || !errors.Is(err, c.kind) {
				t.Fatalf("%d packets, error %v; want a %v error", n, err, c.kind)
			}
			if pe.Offset != c.offset || !strings.Contains(err.Error(), c.what) {
				t.Errorf("error %q; want one at offset %d saying %q", err, c.offset, c.what)
			}
			if alloc > maxHostileAlloc {
				t.Errorf("reading the %d-byte file allocated %d bytes; the bound is %d", len(c.file), alloc, maxHostileAlloc)
			}
			t.Logf("%s (%d bytes): %d bytes allocated", err, len(c.file), alloc)
		})
	}
}

// TestSteadyReadingAllocatesNothing: past the first block, reading
// packets allocates nothing, whatever their number.
func TestSteadyReadingAllocatesNothing(t *testing.T) {
	b := bytes.NewBuffer(cat(shb(), idb(1, snap, opt(optTSResol, []byte{9}))))
	for i := range 1000 {
		b.Write(epb(0, uint64(i), make([]byte, 1+i%1500), uint32(1+i%1500)))
	}
	file := b.Bytes()
	r := bytes.NewReader(file)
	allocs := testing.AllocsPerRun(20, func() {
		r.Reset(file)
		if n, err := Count(r, snap); err != nil || n != 1000 {
			t.Fatalf("%d packets, %v", n, err)
		}
	})
	// A reader, its block buffer (grown once per larger packet) and its
	// interfaces: a few dozen at most, never one a packet.
	if allocs > 40 {
		t.Errorf("%v allocations to read 1000 packets", allocs)
	}
}

// TestSnapLenBoundIsChecked: the caller's bound itself is bounded.
func TestSnapLenBoundIsChecked(t *testing.T) {
	for _, s := range []uint32{0, 1<<30 + 1} {
		if _, err := NewReader(bytes.NewReader(shb()), s); err == nil {
			t.Errorf("snap length bound %d accepted", s)
		}
	}
}

// BenchmarkHostile reads each hostile file: its time and bytes allocated
// an operation are the figures of the worst case.
func BenchmarkHostile(b *testing.B) {
	for _, c := range hostileFiles() {
		b.Run(strings.ReplaceAll(c.name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			r := bytes.NewReader(c.file)
			for b.Loop() {
				r.Reset(c.file)
				if _, err := Count(r, snap); err == nil {
					b.Fatal("no error")
				}
			}
		})
	}
}

// writerFile is a file the packet witness's writer produced
// (witness/pcap's TestWriterSampleIsTheReaderSeed keeps it so).
func writerFile(tb testing.TB) []byte {
	b, err := os.ReadFile("testdata/writer.pcapng")
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
