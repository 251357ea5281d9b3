//go:build linux

package broker

import (
	"reflect"
	"testing"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// ptyReqPayload is a pty-req payload as a client sends it (RFC 4254 §6.2).
func ptyReqPayload(term string, cols, rows, width, height uint32, modes []byte) []byte {
	return gossh.Marshal(struct {
		Term                      string
		Cols, Rows, Width, Height uint32
		Modes                     string
	}{term, cols, rows, width, height, string(modes)})
}

// FuzzPtyReq parses a client's pty-req and applies its terminal modes to
// a termios, as the broker does before the shell starts. A refused request
// yields the zero value; an accepted one has an acceptable terminal name,
// a window in bounds and modes of at most maxModesLen bytes, and reads
// back the same when written again. Applying modes changes only the flag
// bits and control characters RFC 4254 §8 names, and fails only on a
// truncated opcode.
func FuzzPtyReq(f *testing.F) {
	f.Add(ptyReqPayload("xterm-256color", 80, 24, 640, 480, encodeModes(53, 0, 3, 127, 128, 38400)))
	f.Add(ptyReqPayload("vt100", 0, 0, 0, 0, nil))
	f.Add(ptyReqPayload("xterm", 10001, 24, 0, 0, []byte{1}))
	f.Add(ptyReqPayload("x term", 80, 24, 0, 0, nil))
	f.Add(ptyReqPayload("xterm", 80, 24, 0, 0, encodeModes(1, 255, 91, 1, 200, 7, 36, 0)))
	f.Add(ptyReqPayload("xterm", 80, 24, 0, 0, []byte{53, 0, 0}))
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, payload []byte) {
		req, err := parsePtyReq(payload)
		if err != nil {
			if !reflect.ValueOf(req).IsZero() {
				t.Fatalf("refused (%v) but returned %+v", err, req)
			}
			// Feed the raw payload to the mode decoder as well, so that
			// it is fuzzed directly and not only through accepted requests.
			checkTermModes(t, payload)
			return
		}
		if _, werr := checkWindow(req.win, false); werr != nil || len(req.modes) > maxModesLen {
			t.Fatalf("accepted %+v: window %v, %d mode bytes", req, werr, len(req.modes))
		}
		w := req.win
		again, err := parsePtyReq(ptyReqPayload(req.term, w.cols, w.rows, w.width, w.height, req.modes))
		if err != nil || !reflect.DeepEqual(again, req) {
			t.Fatalf("%+v written back parses as %+v, %v", req, again, err)
		}
		checkTermModes(t, req.modes)
	})
}

// checkTermModes applies modes to a termios with every bit clear and to
// one with every bit set.
func checkTermModes(t *testing.T, modes []byte) {
	var mask unix.Termios
	for _, fl := range ttyFlags {
		*fl.field(&mask) |= fl.bit
	}
	for _, idx := range ttyChars {
		mask.Cc[idx] = 0xff
	}
	for _, fill := range []byte{0, 0xff} {
		var before unix.Termios
		fillTermios(&before, fill)
		after := before
		err := applyTermModes(&after, modes)
		if err != nil && !truncatedModes(modes) {
			t.Fatalf("modes % x refused: %v", modes, err)
		}
		if err == nil && truncatedModes(modes) {
			t.Fatalf("truncated modes % x accepted", modes)
		}
		for _, f := range []func(*unix.Termios) *uint32{iflag, lflag, oflag, cflag} {
			if changed := *f(&before) ^ *f(&after); changed&^*f(&mask) != 0 {
				t.Fatalf("modes % x changed flag bits %#x that no opcode names", modes, changed&^*f(&mask))
			}
		}
		for i := range after.Cc {
			if before.Cc[i] != after.Cc[i] && mask.Cc[i] == 0 {
				t.Fatalf("modes % x changed c_cc[%d], which no opcode names", modes, i)
			}
		}
		if after.Ispeed != before.Ispeed || after.Ospeed != before.Ospeed || after.Line != before.Line {
			t.Fatalf("modes % x changed the speed or line discipline", modes)
		}
	}
}

// truncatedModes is the reference reading of RFC 4254 §8: opcodes of
// five bytes until TTY_OP_END, an opcode of 160 or more, or the end.
func truncatedModes(modes []byte) bool {
	for len(modes) > 0 && modes[0] != ttyOpEnd && modes[0] < ttyOpFirstUndefined {
		if len(modes) < 5 {
			return true
		}
		modes = modes[5:]
	}
	return false
}

func fillTermios(t *unix.Termios, b byte) {
	w := uint32(b) * 0x01010101
	t.Iflag, t.Oflag, t.Cflag, t.Lflag, t.Line = w, w, w, w, b
	t.Ispeed, t.Ospeed = w, w
	for i := range t.Cc {
		t.Cc[i] = b
	}
}
