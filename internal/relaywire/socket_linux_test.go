package relaywire

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair is two connected SOCK_SEQPACKET ends.
func pair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]*Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "relaywire-test")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = NewConn(c.(*net.UnixConn))
		t.Cleanup(func() { conns[i].Close() })
	}
	return conns[0], conns[1]
}

func TestConnCarriesFramesWhole(t *testing.T) {
	a, b := pair(t)
	rec := make([]byte, MaxFrame-1)
	rec[len(rec)-1] = 7
	frame, _ := EncodeBytes(TypeRecord, rec)
	if err := a.Write(frame, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	b.Unix().SetReadDeadline(time.Now().Add(time.Second))
	f, err := b.Read(TypeRecord)
	if err != nil || len(f.Body) != len(rec) || f.Body[len(rec)-1] != 7 {
		t.Fatalf("read: %d bytes, %v", len(f.Body), err)
	}
	a.Close()
	if _, err := b.Read(TypeRecord); !errors.Is(err, ErrClosed) {
		t.Fatalf("after the peer's close: %v, want ErrClosed", err)
	}
}

func TestConnRefusesAnOversizedRecord(t *testing.T) {
	a, b := pair(t)
	if err := a.Write(make([]byte, MaxFrame+1), time.Now().Add(time.Second)); err == nil || !strings.Contains(err.Error(), "want 1 to 65537") {
		t.Fatalf("Write of a frame past the bound: %v", err)
	}
	// Equivalent mutant: Write's short-write check (a SOCK_SEQPACKET
	// send is whole or fails) cannot be reached from a test.
	// A peer that does not use Write: one byte past the bound.
	big := make([]byte, MaxFrame+1)
	big[0] = byte(TypeRecord)
	if _, err := a.Unix().Write(big); err != nil {
		t.Fatal(err)
	}
	b.Unix().SetReadDeadline(time.Now().Add(time.Second))
	if _, err := b.Read(TypeRecord); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized record: %v", err)
	}
}

// A peer that attaches a descriptor: the kernel refuses it (SO_PASSRIGHTS
// off, Linux 6.16+), or the reader refuses the frame and closes it.
func TestConnTakesNoDescriptor(t *testing.T) {
	a, b := pair(t)
	rc, _ := b.Unix().SyscallConn()
	rc.Control(func(fd uintptr) {
		v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSRIGHTS)
		if err == nil && v != 0 {
			t.Errorf("SO_PASSRIGHTS is %d on a wrapped connection, want 0", v)
		}
	})
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, _, err = a.Unix().WriteMsgUnix(Encode(TypeStatus), unix.UnixRights(int(f.Fd())), nil)
	if err != nil {
		return // refused by the kernel: nothing can arrive
	}
	b.Unix().SetReadDeadline(time.Now().Add(time.Second))
	if _, err := b.Read(TypeStatus); err == nil || !strings.Contains(err.Error(), "control data") {
		t.Fatalf("a frame with a descriptor: %v", err)
	}
}

func TestConnReadWaitsOnlyUntilTheDeadline(t *testing.T) {
	_, b := pair(t)
	b.Unix().SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := b.Read(TypeRecord); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
}
