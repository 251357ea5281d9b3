package agentwire

import (
	"encoding/binary"
	"fmt"
)

// The protocol's one binary codec: a field is a u32, big-endian, or a
// string, its u32 length then its bytes; a message is its fields in order.
// The agent's frame bodies (wire_linux.go) and the login trampoline's
// command (launch/login) are written and read with it, never by hand.

// Encoder appends fields to a message.
type Encoder struct{ b []byte }

// NewEncoder starts a message in buf's spare capacity (buf[:0] is kept:
// a caller may put a header there first).
func NewEncoder(buf []byte) *Encoder { return &Encoder{b: buf} }

// U32 appends v.
func (e *Encoder) U32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }

// Str appends s, its length first.
func (e *Encoder) Str(s string) {
	e.U32(uint32(len(s)))
	e.b = append(e.b, s...)
}

// Flag appends 1 for true, 0 for false.
func (e *Encoder) Flag(v bool) {
	if v {
		e.U32(1)
		return
	}
	e.U32(0)
}

// Bytes is the message so far.
func (e *Encoder) Bytes() []byte { return e.b }

// Decoder reads fields in order; the first failure sticks and later reads
// return zero values, so a message is decoded in one expression and
// checked once (Err, End). Every failure names what is decoded.
type Decoder struct {
	b    []byte
	what string
	err  error
}

// NewDecoder reads the message b; what names it in errors ("spawn frame").
func NewDecoder(b []byte, what string) *Decoder { return &Decoder{b: b, what: what} }

func (d *Decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: "+format, append([]any{d.what}, args...)...)
	}
}

// U32 reads a u32.
func (d *Decoder) U32() uint32 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 4 {
		d.fail("body ends inside a field")
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

// Str reads a string of at most max bytes.
func (d *Decoder) Str(max int) string {
	n := d.U32()
	if d.err != nil {
		return ""
	}
	if n > uint32(max) {
		d.fail("a field of %d bytes, at most %d", n, max)
		return ""
	}
	if uint32(len(d.b)) < n {
		d.fail("body ends inside a field")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// Flag reads a flag: 0 or 1, as Encoder.Flag writes it; anything else is
// not this codec's.
func (d *Decoder) Flag() bool {
	v := d.U32()
	if v > 1 {
		d.fail("a flag of %d, other than 0 or 1", v)
	}
	return v == 1
}

// Count reads the count of a list whose entries are at most max and take
// at least 4 bytes each, so that a count is never believed past the bytes
// that could hold it.
func (d *Decoder) Count(max int) int {
	n := d.U32()
	switch {
	case d.err != nil:
		return 0
	case n > uint32(max):
		d.fail("%d entries, at most %d", n, max)
		return 0
	case n > uint32(len(d.b))/4:
		d.fail("%d entries in %d bytes", n, len(d.b))
		return 0
	}
	return int(n)
}

// End is the first failure, or an error if bytes follow the last field.
func (d *Decoder) End() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the last field", len(d.b))
	}
	return d.err
}
