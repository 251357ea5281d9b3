package broker

import (
	"encoding/binary"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

func encodeModes(pairs ...uint32) []byte {
	var b []byte
	for i := 0; i+1 < len(pairs); i += 2 {
		b = append(b, byte(pairs[i]))
		b = binary.BigEndian.AppendUint32(b, pairs[i+1])
	}
	return append(b, ttyOpEnd)
}

func TestApplyTermModes(t *testing.T) {
	var tio unix.Termios
	tio.Lflag = unix.ECHO | unix.ICANON
	tio.Oflag = unix.OPOST
	modes := encodeModes(
		53, 0, // ECHO off
		72, 1, // ONLCR on
		1, 3, // VINTR = ^C
		2, 255, // VQUIT disabled
		42, 1, // IUTF8 on
		11, 7, // VDSUSP: not on Linux, skipped with its argument
		128, 38400, // TTY_OP_ISPEED: ignored
	)
	if err := applyTermModes(&tio, modes); err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&unix.ECHO != 0 || tio.Lflag&unix.ICANON == 0 {
		t.Errorf("lflag = %#x, want ECHO off and ICANON kept", tio.Lflag)
	}
	if tio.Oflag&unix.ONLCR == 0 || tio.Oflag&unix.OPOST == 0 {
		t.Errorf("oflag = %#x, want OPOST|ONLCR", tio.Oflag)
	}
	if tio.Iflag&unix.IUTF8 == 0 {
		t.Errorf("iflag = %#x, want IUTF8", tio.Iflag)
	}
	if tio.Cc[unix.VINTR] != 3 || tio.Cc[unix.VQUIT] != linuxVDisable {
		t.Errorf("cc VINTR=%d VQUIT=%d", tio.Cc[unix.VINTR], tio.Cc[unix.VQUIT])
	}
}

func TestApplyTermModesStops(t *testing.T) {
	var tio unix.Termios
	// An undefined opcode (>= 160) stops parsing: ECHO after it is not applied.
	modes := append([]byte{160}, encodeModes(53, 1)...)
	if err := applyTermModes(&tio, modes); err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&unix.ECHO != 0 {
		t.Error("parsed past an undefined opcode")
	}
	if err := applyTermModes(&tio, []byte{53, 0, 0}); err == nil {
		t.Error("truncated modes accepted")
	}
}

func TestSetTermModesOnPTY(t *testing.T) {
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("no pty available: %v", err)
	}
	defer master.Close()
	defer slave.Close()
	if err := setTermModes(slave, encodeModes(53, 0, 3, 8)); err != nil {
		t.Fatal(err)
	}
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&unix.ECHO != 0 || tio.Cc[unix.VERASE] != 8 {
		t.Errorf("modes not applied: lflag=%#x verase=%d", tio.Lflag, tio.Cc[unix.VERASE])
	}
}
