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

// TestPendingEventsBounded: events of sessions not bound yet wait, up to
// maxPendingSessions sessions and maxPendingEvents events each; past
// either bound an event is counted as unattributed, never kept.
func TestPendingEventsBounded(t *testing.T) {
	e := &Engine{pending: map[uint32][]*Event{}, pendAt: map[uint32]time.Time{}}
	for ses := range uint32(maxPendingSessions) {
		e.queue(&Event{Ses: ses + 1})
	}
	if len(e.pending) != maxPendingSessions || e.stats.Unattributed != 0 {
		t.Fatalf("%d sessions waiting, %d unattributed; want all %d waiting", len(e.pending), e.stats.Unattributed, maxPendingSessions)
	}
	e.queue(&Event{Ses: maxPendingSessions + 1})
	if len(e.pending) != maxPendingSessions || e.stats.Unattributed != 1 {
		t.Errorf("a session past the bound: %d waiting, %d unattributed; want %d and 1", len(e.pending), e.stats.Unattributed, maxPendingSessions)
	}
	// A session already waiting still takes events, up to its bound.
	for range maxPendingEvents - 1 {
		e.queue(&Event{Ses: 1})
	}
	if n := len(e.pending[1]); n != maxPendingEvents || e.stats.Unattributed != 1 {
		t.Fatalf("session 1 holds %d events, %d unattributed; want %d and 1", n, e.stats.Unattributed, maxPendingEvents)
	}
	e.queue(&Event{Ses: 1})
	if n := len(e.pending[1]); n != maxPendingEvents || e.stats.Unattributed != 2 {
		t.Errorf("an event past the session's bound: %d held, %d unattributed; want %d and 2", n, e.stats.Unattributed, maxPendingEvents)
	}
}

// TestKnownSessionsBounded: the sessions the engine has seen bound are
// remembered up to maxKnownSessions; at the bound the memory starts over
// from the sessions bound now, and the new one.
func TestKnownSessionsBounded(t *testing.T) {
	e := &Engine{bound: map[uint32][]*witness{}, known: map[uint32]bool{}, pending: map[uint32][]*Event{}, pendAt: map[uint32]time.Time{}}
	for ses := range uint32(maxKnownSessions - 1) {
		e.known[ses+100] = true
	}
	w := &witness{}
	e.bind(w, 7)
	if len(e.known) != maxKnownSessions {
		t.Fatalf("%d sessions known after one bind below the bound, want %d", len(e.known), maxKnownSessions)
	}
	e.bind(w, 8)
	if len(e.known) != 2 || !e.known[7] || !e.known[8] {
		t.Errorf("at the bound: %d known; want the bound sessions 7 and 8 only", len(e.known))
	}
}
