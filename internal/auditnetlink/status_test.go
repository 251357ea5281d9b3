package auditnetlink

import (
	"encoding/binary"
	"testing"
)

// AUDIT_SET through this package changes the enabled flag and the backlog
// limit only: the daemon pid (0x4) would displace a host auditd, and the
// failure mode (0x2) or rate limit (0x8) are the host's to choose.
func TestSetChangesOnlyEnabledAndTheBacklog(t *testing.T) {
	for _, mask := range []uint32{0x2, 0x4, 0x8, 0x20, StatusEnabled | 0x4, 1 << 31} {
		if _, err := setPayload(mask, 1, 1); err == nil {
			t.Errorf("mask %#x accepted", mask)
		}
	}
	for _, c := range [][3]uint32{{StatusEnabled, 2, 0}, {StatusEnabled, 3, 0}, {StatusBacklog, 0, 0}, {StatusEnabled | StatusBacklog, 1, 0}} {
		if _, err := setPayload(c[0], c[1], c[2]); err == nil {
			t.Errorf("set %#x enabled=%d backlog=%d accepted", c[0], c[1], c[2])
		}
	}
	if _, err := setPayload(StatusEnabled, 0, 0); err != nil {
		t.Errorf("turning auditing off refused: %v", err)
	}
	p, err := setPayload(StatusEnabled|StatusBacklog, 1, 8192)
	if err != nil {
		t.Fatal(err)
	}
	ne := binary.NativeEndian
	if len(p) != 40 || ne.Uint32(p[0:]) != 0x11 || ne.Uint32(p[4:]) != 1 || ne.Uint32(p[20:]) != 8192 || ne.Uint32(p[12:]) != 0 {
		t.Fatalf("payload %x", p)
	}
}

func TestParseStatus(t *testing.T) {
	if _, err := ParseStatus(make([]byte, StatusLen-1)); err == nil {
		t.Fatal("a short status parsed")
	}
	if _, err := ParseStatus(make([]byte, StatusLen)); err != nil {
		t.Fatalf("a status of StatusLen bytes: %v", err)
	}
	b := make([]byte, 40)
	ne := binary.NativeEndian
	for i, v := range []uint32{0, 1, 2, 77, 9, 8192, 5, 3} {
		ne.PutUint32(b[4*i:], v)
	}
	st, err := ParseStatus(b)
	want := Status{Enabled: 1, Failure: 2, PID: 77, RateLimit: 9, BacklogLimit: 8192, Lost: 5, Backlog: 3}
	if err != nil || st != want {
		t.Fatalf("status %+v %v, want %+v", st, err, want)
	}
}
