package agentwire

import (
	"strings"
	"testing"
)

// TestCodecRefusesWhatItDoesNotWrite: a message round-trips; a count past
// the bytes that could hold its entries, a string past its bound, a flag
// other than 0 or 1 and bytes after the last field are refused, each
// error naming the message; after the first failure reads return zero.
func TestCodecRefusesWhatItDoesNotWrite(t *testing.T) {
	e := NewEncoder(nil)
	e.Str("kali")
	e.U32(7)
	e.Flag(true)
	e.U32(2)
	e.Str("a")
	e.Str("four") // exactly its bound
	d := NewDecoder(e.Bytes(), "test message")
	name, n, flag := d.Str(16), d.U32(), d.Flag()
	var list []string
	for c := d.Count(8); c > 0; c-- {
		list = append(list, d.Str(4))
	}
	if err := d.End(); err != nil || name != "kali" || n != 7 || !flag || strings.Join(list, ",") != "a,four" {
		t.Fatalf("round trip: %q %d %v %v: %v", name, n, flag, list, err)
	}

	for _, tc := range []struct {
		name string
		body func(*Encoder)
		read func(*Decoder)
		want string
	}{
		{"count past the bytes", func(e *Encoder) { e.U32(1000); e.Str("x") }, func(d *Decoder) { d.Count(2000) }, "1000 entries in 5 bytes"},
		{"count past its bound", func(e *Encoder) { e.U32(9) }, func(d *Decoder) { d.Count(8) }, "9 entries, at most 8"},
		{"string past its bound", func(e *Encoder) { e.Str("toolong") }, func(d *Decoder) { d.Str(4) }, "a field of 7 bytes, at most 4"},
		{"string past the body", func(e *Encoder) { e.U32(10); e.U32(0) }, func(d *Decoder) { d.Str(100) }, "body ends inside a field"},
		{"flag 2", func(e *Encoder) { e.U32(2) }, func(d *Decoder) { d.Flag() }, "a flag of 2, other than 0 or 1"},
		{"bytes after the last field", func(e *Encoder) { e.U32(1); e.U32(1) }, func(d *Decoder) { d.U32() }, "4 bytes after the last field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEncoder(nil)
			tc.body(e)
			d := NewDecoder(e.Bytes(), "test message")
			tc.read(d)
			err := d.End()
			if err == nil || !strings.HasPrefix(err.Error(), "test message: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if d.U32() != 0 || d.Str(10) != "" || d.End() != err {
				t.Error("reads after a failure return values, or the failure changed")
			}
		})
	}
}
