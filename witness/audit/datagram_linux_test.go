package audit

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nlmsg is one netlink message: its header (length, type) and text, not
// padded; pad says how many zero bytes follow it to the next message.
func nlmsg(typ uint16, text string, pad int) []byte {
	b := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(text)+pad)
	binary.NativeEndian.PutUint32(b[0:], uint32(unix.NLMSG_HDRLEN+len(text)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	return append(append(b, text...), make([]byte, pad)...)
}

// TestParseDatagramWalksAlignedMessages: the messages of a datagram are
// walked by their lengths, each next one at the netlink alignment (the
// kernel does not pad the last); a message whose length is shorter than
// its header or longer than the datagram is malformed and ends the walk;
// bytes too few for a header are not a message.
func TestParseDatagramWalksAlignedMessages(t *testing.T) {
	now := time.Unix(100, 0)
	syscall := `audit(1796112666.327:100): arch=c000003e syscall=59 success=yes exit=0 pid=2 auid=4242 ses=197 comm="id"`
	eoe := `audit(1796112666.327:100): `
	// The syscall record's length is not a multiple of 4: the EOE after
	// it starts at the next multiple.
	if (unix.NLMSG_HDRLEN+len(syscall))%unix.NLMSG_ALIGNTO == 0 {
		syscall += "x"
	}
	pad := (unix.NLMSG_ALIGNTO - (unix.NLMSG_HDRLEN+len(syscall))%unix.NLMSG_ALIGNTO) % unix.NLMSG_ALIGNTO
	asm := newAssembler()
	done := parseDatagram(asm, append(nlmsg(typeSyscall, syscall, pad), nlmsg(1320, eoe, 0)...), now)
	if len(done) != 1 || len(done[0].Records) != 1 || asm.malformed != 0 {
		t.Fatalf("two aligned messages: %d events (%+v), %d malformed; want the syscall event completed by its EOE", len(done), done, asm.malformed)
	}

	for _, tt := range []struct {
		name      string
		datagram  []byte
		malformed int64
	}{
		// Read, and refused by the assembler: a record has a header.
		{"a header alone", nlmsg(1320, "", 0), 1},
		{"bytes too few for a header", make([]byte, unix.NLMSG_HDRLEN-1), 0},
		{"a length shorter than the header", func() []byte {
			b := nlmsg(typeSyscall, syscall, 0)
			binary.NativeEndian.PutUint32(b, unix.NLMSG_HDRLEN-1)
			return b
		}(), 1},
		{"a length past the datagram", func() []byte {
			b := nlmsg(typeSyscall, syscall, 0)
			binary.NativeEndian.PutUint32(b, uint32(len(b)+1))
			return b
		}(), 1},
		{"a length of exactly the datagram", nlmsg(typeSyscall, syscall, 0), 0},
	} {
		asm := newAssembler()
		parseDatagram(asm, tt.datagram, now)
		if asm.malformed != tt.malformed {
			t.Errorf("%s: %d malformed, want %d", tt.name, asm.malformed, tt.malformed)
		}
	}
	// A header alone, then a whole event: the walk goes on past it.
	asm = newAssembler()
	done = parseDatagram(asm, append(append(nlmsg(1320, "", 0), nlmsg(typeSyscall, syscall, pad)...), nlmsg(1320, eoe, 0)...), now)
	if len(done) != 1 || asm.malformed != 1 {
		t.Errorf("a header alone, then an event: %d events, %d malformed; want the event and the one refused record", len(done), asm.malformed)
	}
}
