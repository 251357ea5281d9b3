package audit

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// datagram is one record as the kernel sends it on the multicast group.
func datagram(typ uint16, text string) []byte {
	b := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(text))
	binary.NativeEndian.PutUint32(b[0:], uint32(unix.NLMSG_HDRLEN+len(text)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	return append(b, text...)
}

// TestTurnOnBusySocket: on a host whose processes keep the socket busy
// (it is never found empty), a user message, which has no EOE, is still
// complete eventLinger after it came, and the engine's settled instant
// follows the records read, so a closing session need not wait for an
// idle socket it would never see.
func TestTurnOnBusySocket(t *testing.T) {
	e := newEngine(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	asm := newAssembler()
	start := time.Unix(1796112666, 0)
	stamp := func(at time.Time, serial int) string {
		return fmt.Sprintf("audit(%d.%03d:%d): ", at.Unix(), at.Nanosecond()/1e6, serial)
	}
	e.turn(asm, datagram(1005, stamp(start, 1)+"pid=9 uid=0 auid=4242 ses=7 msg='op=forged'"), nil, start)
	userAt := time.Duration(-1)
	for i := 1; i <= 50; i++ {
		now := start.Add(time.Duration(i) * 10 * time.Millisecond)
		// Another session's syscall events, one every 10 ms: the
		// socket is never empty.
		e.turn(asm, datagram(1300, stamp(now, 1+i)+"syscall=59 auid=5000 ses=9"), nil, now)
		e.turn(asm, datagram(1320, stamp(now, 1+i)), nil, now)
		if userAt < 0 && len(e.pending[7]) == 1 {
			userAt = now.Sub(start)
		}
	}
	if userAt < 0 {
		t.Fatalf("the user message was never completed on a busy socket (%d sessions pending)", len(e.pending))
	}
	if userAt < eventLinger || userAt > eventLinger+pollEvery {
		t.Errorf("the user message was completed %v after it came, want %v after", userAt, eventLinger)
	}
	last := start.Add(500 * time.Millisecond)
	if want := last.Add(-stampCoarseness); !e.settledAt.Equal(want) {
		t.Errorf("settled at %v after the last record of %v, want %v", e.settledAt.Sub(start), last.Sub(start), want.Sub(start))
	}
	// An event still open holds the settled instant at its time.
	openAt := last.Add(time.Millisecond)
	e.turn(asm, datagram(1300, stamp(openAt, 99)+"syscall=59 auid=5000 ses=9"), nil, openAt)
	e.turn(asm, nil, nil, openAt.Add(time.Millisecond))
	if !e.settledAt.Equal(openAt) {
		t.Errorf("with an event open since %v, settled at %v", openAt.Sub(start), e.settledAt.Sub(start))
	}
	// Empty and nothing open: settled is now.
	idle := openAt.Add(eventLinger + 2*time.Second)
	e.turn(asm, nil, nil, idle)
	if !e.settledAt.Equal(idle) {
		t.Errorf("idle with nothing open: settled at %v, want %v", e.settledAt.Sub(start), idle.Sub(start))
	}
}
