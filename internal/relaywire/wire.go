// Package relaywire is the protocol between the capture sidecar's audit
// engine (witness/audit, the client) and the witness relay
// (witness/auditrelay, the server), which holds the kernel's audit netlink
// where the kernel requires it: the initial PID namespace for rules and
// status, the initial network namespace for the records' multicast group
// (docs/WITNESSES.md, "The witness relay"). Every frame either side sends
// or accepts is in this package; who may connect is decided by CheckPeer,
// on both sides, from the credentials the kernel recorded at connect(2).
//
//	sidecar (auditrelay.Dial)                        relay (auditrelay.Server)
//	connect SOCK_SEQPACKET ─────────────────────────▶ accept; CheckPeer (the sidecar's uid
//	CheckPeer (the relay's uid and gid)                and gid), else close with no reply
//	hello {version, role}      ─────────────────────▶ a control or a records connection
//	                           ◀───────────────────── welcome {version}
//
//	control: one request at a time, each answered by zero or more
//	replies and exactly one done:
//	status                     ─────────────────────▶ AUDIT_GET
//	                           ◀───────────────────── status-reply {the kernel's bytes}, done
//	set {mask enabled backlog} ─────────────────────▶ AUDIT_SET (mask: enabled, backlog limit only)
//	add-rule / del-rule {rule} ─────────────────────▶ AUDIT_ADD_RULE / AUDIT_DEL_RULE, as sent
//	list-rules                 ─────────────────────▶ AUDIT_LIST_RULES
//	                           ◀───────────────────── rule {the kernel's bytes} × n, done
//	                           ◀───────────────────── done {errno, message}
//
//	records: the relay sends, the sidecar only reads:
//	                           ◀───────────────────── record {one multicast datagram, as the kernel sent it}
//	                           ◀───────────────────── overrun {count}: datagrams the kernel or the
//	                                                  relay's queue dropped since the last frame
//	                           ◀───────────────────── idle {unix nanoseconds}: at that instant the
//	                                                  kernel's socket was empty and every record
//	                                                  read before it was ahead of this frame
//
// A frame is one SOCK_SEQPACKET record, so frames are never split or
// merged: a type byte, then the body; a record longer than MaxFrame is
// refused (MSG_TRUNC). Bodies are u32 big-endian fields or, for the
// kernel's own bytes (status, rules, records), the rest of the frame.
// Neither side passes file descriptors: SO_PASSRIGHTS is off on both ends
// (Linux 6.16+), so the kernel refuses any.
//
// The relay parses nothing of what it forwards: rule bytes go to the
// kernel as they came (the kernel validates them), records and listed
// rules come back as the kernel sent them, and the one field it reads is
// set's mask, which may change only auditing's enabled flag and the
// backlog limit (internal/auditnetlink), never the daemon pid: the relay
// cannot be made to displace a host auditd.
package relaywire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Version is the protocol version; both sides refuse any other.
const Version = 1

// Bounds. MaxFrame holds the largest datagram the kernel's audit netlink
// sends (a record is at most MAX_AUDIT_MESSAGE_LENGTH, 8,970 bytes, and a
// listed rule at most a page and its key) with room to spare; MaxMessage
// bounds a done frame's message.
const (
	MaxFrame   = 1 + 1<<16
	MaxMessage = 256
)

// Type is a frame's type.
type Type uint8

const (
	TypeHello       Type = 1
	TypeWelcome     Type = 2
	TypeStatus      Type = 3
	TypeSet         Type = 4
	TypeAddRule     Type = 5
	TypeDelRule     Type = 6
	TypeListRules   Type = 7
	TypeStatusReply Type = 8
	TypeRule        Type = 9
	TypeDone        Type = 10
	TypeRecord      Type = 11
	TypeOverrun     Type = 12
	TypeIdle        Type = 13
)

var typeNames = map[Type]string{
	TypeHello: "hello", TypeWelcome: "welcome", TypeStatus: "status", TypeSet: "set",
	TypeAddRule: "add-rule", TypeDelRule: "del-rule", TypeListRules: "list-rules",
	TypeStatusReply: "status-reply", TypeRule: "rule", TypeDone: "done",
	TypeRecord: "record", TypeOverrun: "overrun", TypeIdle: "idle",
}

func (t Type) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("type %d", uint8(t))
}

// Role is what a connection is for, stated in its hello.
type Role uint32

const (
	RoleControl Role = 1
	RoleRecords Role = 2
)

func (r Role) String() string {
	switch r {
	case RoleControl:
		return "control"
	case RoleRecords:
		return "records"
	}
	return fmt.Sprintf("role %d", uint32(r))
}

// ErrProtocol marks a frame the protocol does not allow.
var ErrProtocol = errors.New("relay wire")

func protocolf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// Frame is one decoded frame: its type and its body.
type Frame struct {
	Type Type
	Body []byte
}

// Parse checks one received record and returns its frame if its type is
// one of want.
func Parse(b []byte, want ...Type) (Frame, error) {
	if len(b) == 0 {
		return Frame{}, protocolf("empty frame")
	}
	if len(b) > MaxFrame {
		return Frame{}, protocolf("frame of %d bytes, at most %d", len(b), MaxFrame)
	}
	f := Frame{Type: Type(b[0]), Body: b[1:]}
	for _, w := range want {
		if f.Type == w {
			return f, f.checkBody()
		}
	}
	return Frame{}, protocolf("unexpected %s frame, want %v", f.Type, want)
}

// bodyLen is each fixed-size body's length; -1 for the kernel's bytes.
var bodyLen = map[Type]int{
	TypeHello: 8, TypeWelcome: 4, TypeStatus: 0, TypeSet: 12, TypeAddRule: -1,
	TypeDelRule: -1, TypeListRules: 0, TypeStatusReply: -1, TypeRule: -1,
	TypeDone:   -2, // an errno and a message (ParseDone)
	TypeRecord: -1, TypeOverrun: 4, TypeIdle: 8,
}

func (f Frame) checkBody() error {
	switch n := bodyLen[f.Type]; {
	case n >= 0 && len(f.Body) != n:
		return protocolf("%s frame with a body of %d bytes, want %d", f.Type, len(f.Body), n)
	case n == -1 && len(f.Body) == 0:
		return protocolf("%s frame with an empty body", f.Type)
	case n == -2 && (len(f.Body) < 4 || len(f.Body) > 4+MaxMessage):
		return protocolf("%s frame with a body of %d bytes, want 4 to %d", f.Type, len(f.Body), 4+MaxMessage)
	}
	return nil
}

// Encode is a frame of type t with body fields.
func Encode(t Type, fields ...uint32) []byte {
	b := make([]byte, 1, 1+4*len(fields))
	b[0] = byte(t)
	for _, v := range fields {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

// EncodeBytes is a frame of type t carrying the kernel's bytes b.
func EncodeBytes(t Type, b []byte) ([]byte, error) {
	if len(b) == 0 || 1+len(b) > MaxFrame {
		return nil, fmt.Errorf("relay wire: %s frame of %d bytes, want 1 to %d", t, len(b), MaxFrame-1)
	}
	return append([]byte{byte(t)}, b...), nil
}

// U32 is the body's i-th u32 field; the body's length was checked by Parse.
func (f Frame) U32(i int) uint32 { return binary.BigEndian.Uint32(f.Body[4*i:]) }

// Idle is the frame saying that at t the kernel's socket was empty and
// every record read before it has been sent.
func Idle(t time.Time) []byte {
	n := uint64(t.UnixNano())
	return Encode(TypeIdle, uint32(n>>32), uint32(n))
}

// ParseIdle returns an idle frame's instant.
func ParseIdle(f Frame) time.Time {
	return time.Unix(0, int64(uint64(f.U32(0))<<32|uint64(f.U32(1))))
}

// Hello is a client's first frame.
func Hello(role Role) []byte { return Encode(TypeHello, Version, uint32(role)) }

// ParseHello returns the role of a hello frame, refusing another version
// or an unknown role.
func ParseHello(f Frame) (Role, error) {
	if v := f.U32(0); v != Version {
		return 0, protocolf("hello of version %d, this side speaks %d", v, Version)
	}
	switch r := Role(f.U32(1)); r {
	case RoleControl, RoleRecords:
		return r, nil
	default:
		return 0, protocolf("hello with unknown %v", r)
	}
}

// Done is the end of a reply: errno is the kernel's refusal (0: none),
// message the relay's own failure (the kernel did not answer). Both zero:
// the request was done.
func Done(errno uint32, message string) []byte {
	if len(message) > MaxMessage {
		message = message[:MaxMessage]
	}
	return append(Encode(TypeDone, errno), message...)
}

// ParseDone returns a done frame's errno and message.
func ParseDone(f Frame) (errno uint32, message string, err error) {
	errno = f.U32(0)
	if errno > math.MaxInt16 {
		return 0, "", protocolf("done frame with errno %d", errno)
	}
	for _, c := range f.Body[4:] {
		if c < ' ' || c >= 0x7f {
			return 0, "", protocolf("done frame's message has a non-printable byte")
		}
	}
	return errno, string(f.Body[4:]), nil
}
