package broker

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Terminal modes from pty-req (RFC 4254 §8) are applied to the slave before
// the shell starts, the way OpenSSH's sshd does (tty_parse_modes in ttymodes.c).
// Without this a client that asks for, say, -echo or a different VINTR gets the
// kernel defaults instead, and raw-mode programs see different bytes than the
// client expects.

const (
	ttyOpEnd = 0
	// Opcodes 160..255 "are not yet defined, and cause parsing to stop"
	// (RFC 4254 §8); 1..159 all carry a uint32 argument.
	ttyOpFirstUndefined = 160
	// vdisable is what RFC 4254 clients send (255) for a disabled control
	// character; Linux spells it _POSIX_VDISABLE = 0.
	sshVDisable   = 255
	linuxVDisable = 0
)

// ttyChars maps RFC 4254 opcodes to c_cc indexes. Opcodes for characters
// Linux does not have (VDSUSP, VSTATUS, VSWTCH, VFLUSH) are skipped, as sshd
// does on Linux.
var ttyChars = map[byte]int{
	1: unix.VINTR, 2: unix.VQUIT, 3: unix.VERASE, 4: unix.VKILL, 5: unix.VEOF,
	6: unix.VEOL, 7: unix.VEOL2, 8: unix.VSTART, 9: unix.VSTOP, 10: unix.VSUSP,
	12: unix.VREPRINT, 13: unix.VWERASE, 14: unix.VLNEXT, 18: unix.VDISCARD,
}

type ttyFlag struct {
	field func(*unix.Termios) *uint32
	bit   uint32
}

func iflag(t *unix.Termios) *uint32 { return &t.Iflag }
func lflag(t *unix.Termios) *uint32 { return &t.Lflag }
func oflag(t *unix.Termios) *uint32 { return &t.Oflag }
func cflag(t *unix.Termios) *uint32 { return &t.Cflag }

var ttyFlags = map[byte]ttyFlag{
	30: {iflag, unix.IGNPAR}, 31: {iflag, unix.PARMRK}, 32: {iflag, unix.INPCK},
	33: {iflag, unix.ISTRIP}, 34: {iflag, unix.INLCR}, 35: {iflag, unix.IGNCR},
	36: {iflag, unix.ICRNL}, 37: {iflag, unix.IUCLC}, 38: {iflag, unix.IXON},
	39: {iflag, unix.IXANY}, 40: {iflag, unix.IXOFF}, 41: {iflag, unix.IMAXBEL},
	42: {iflag, unix.IUTF8},
	50: {lflag, unix.ISIG}, 51: {lflag, unix.ICANON}, 52: {lflag, unix.XCASE},
	53: {lflag, unix.ECHO}, 54: {lflag, unix.ECHOE}, 55: {lflag, unix.ECHOK},
	56: {lflag, unix.ECHONL}, 57: {lflag, unix.NOFLSH}, 58: {lflag, unix.TOSTOP},
	59: {lflag, unix.IEXTEN}, 60: {lflag, unix.ECHOCTL}, 61: {lflag, unix.ECHOKE},
	62: {lflag, unix.PENDIN},
	70: {oflag, unix.OPOST}, 71: {oflag, unix.OLCUC}, 72: {oflag, unix.ONLCR},
	73: {oflag, unix.OCRNL}, 74: {oflag, unix.ONOCR}, 75: {oflag, unix.ONLRET},
	90: {cflag, unix.CS7}, 91: {cflag, unix.CS8}, 92: {cflag, unix.PARENB},
	93: {cflag, unix.PARODD},
}

// applyTermModes decodes RFC 4254 encoded modes into t. Unknown opcodes
// below 160 are skipped with their argument, as sshd does; a truncated
// encoding is an error.
func applyTermModes(t *unix.Termios, modes []byte) error {
	for len(modes) > 0 {
		op := modes[0]
		if op == ttyOpEnd || op >= ttyOpFirstUndefined {
			return nil
		}
		if len(modes) < 5 {
			return fmt.Errorf("terminal modes: opcode %d truncated", op)
		}
		arg := binary.BigEndian.Uint32(modes[1:5])
		modes = modes[5:]
		if idx, ok := ttyChars[op]; ok {
			if arg == sshVDisable {
				arg = linuxVDisable
			}
			t.Cc[idx] = uint8(arg)
			continue
		}
		if f, ok := ttyFlags[op]; ok {
			if arg != 0 {
				*f.field(t) |= f.bit
			} else {
				*f.field(t) &^= f.bit
			}
		}
		// TTY_OP_ISPEED/OSPEED (128, 129) are meaningless on a pty.
	}
	return nil
}

// setTermModes applies encoded pty-req modes to the terminal behind tty.
func setTermModes(tty *os.File, modes []byte) error {
	if len(modes) == 0 {
		return nil
	}
	conn, err := tty.SyscallConn()
	if err != nil {
		return fmt.Errorf("terminal modes: %w", err)
	}
	var opErr error
	err = conn.Control(func(fd uintptr) {
		t, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
		if err != nil {
			opErr = os.NewSyscallError("tcgets", err)
			return
		}
		if opErr = applyTermModes(t, modes); opErr != nil {
			return
		}
		opErr = os.NewSyscallError("tcsets", unix.IoctlSetTermios(int(fd), unix.TCSETS, t))
	})
	if err != nil {
		return fmt.Errorf("terminal modes: %w", err)
	}
	return opErr
}
