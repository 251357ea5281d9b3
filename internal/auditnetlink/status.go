package auditnetlink

import (
	"encoding/binary"
	"errors"
)

// Mask bits of AUDIT_SET that Set may change.
const (
	StatusEnabled = 0x1  // AUDIT_STATUS_ENABLED
	StatusBacklog = 0x10 // AUDIT_STATUS_BACKLOG_LIMIT
)

// StatusLen is the part of struct audit_status that ParseStatus reads:
// mask, enabled, failure, pid, rate_limit, backlog_limit, lost, backlog.
const StatusLen = 32

// Status is the part of struct audit_status the witness reads.
type Status struct {
	Enabled, Failure, PID, RateLimit, BacklogLimit, Lost, Backlog uint32
}

// ParseStatus reads the kernel's AUDIT_GET reply body (host byte order;
// a newer kernel's longer struct is read as far as StatusLen).
func ParseStatus(b []byte) (Status, error) {
	if len(b) < StatusLen {
		return Status{}, errors.New("audit: short status reply")
	}
	ne := binary.NativeEndian
	return Status{Enabled: ne.Uint32(b[4:]), Failure: ne.Uint32(b[8:]), PID: ne.Uint32(b[12:]),
		RateLimit: ne.Uint32(b[16:]), BacklogLimit: ne.Uint32(b[20:]), Lost: ne.Uint32(b[24:]), Backlog: ne.Uint32(b[28:])}, nil
}

// setPayload is AUDIT_SET's body changing only what mask says: enabled
// and the backlog limit. A mask with any other bit is refused, so no
// caller (the relay's peer included) can set the daemon pid, the failure
// mode or the rate limit through this package; and so are the values the
// witness never asks for: enabled 2 locks the host's audit configuration
// until a reboot, a backlog limit of 0 lifts the kernel's bound.
func setPayload(mask, enabled, backlogLimit uint32) ([]byte, error) {
	switch {
	case mask&^(StatusEnabled|StatusBacklog) != 0:
		return nil, errors.New("audit: set may change only enabled and the backlog limit")
	case mask&StatusEnabled != 0 && enabled > 1:
		return nil, errors.New("audit: set may turn auditing on or off, never lock its configuration")
	case mask&StatusBacklog != 0 && backlogLimit == 0:
		return nil, errors.New("audit: set may not lift the backlog limit (0)")
	}
	p := make([]byte, 40)
	ne := binary.NativeEndian
	ne.PutUint32(p[0:], mask)
	ne.PutUint32(p[4:], enabled)
	ne.PutUint32(p[20:], backlogLimit)
	return p, nil
}
