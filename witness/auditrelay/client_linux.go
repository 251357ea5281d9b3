package auditrelay

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/auditnetlink"
	"github.com/aptl/aptl-kali-capture/internal/relaywire"
)

// Peer is where the sidecar finds the relay, and whom it accepts there.
type Peer struct {
	Socket string
	// UID and GID are the relay's credentials (SO_PEERCRED): a process
	// that bound the socket as anyone else is not the relay.
	UID, GID int
}

// ErrDown is a relay that cannot be reached or whose connection ended:
// the engine states the window as a gap and reconnects.
var ErrDown = errors.New("the witness relay is unreachable")

// dialWait bounds connect and the welcome; requestWait each request,
// beyond the kernel's own reply bound.
const (
	dialWait    = 2 * time.Second
	requestWait = auditnetlink.ReplyTimeout + 2*time.Second
)

func down(err error) error { return fmt.Errorf("%w: %v", ErrDown, err) }

// dial opens one connection of role and checks the relay's credentials
// before sending anything.
func dial(p Peer, role relaywire.Role) (*relaywire.Conn, error) {
	c, err := relaywire.Dial(p.Socket, dialWait)
	if err != nil {
		return nil, down(err)
	}
	cred, err := c.PeerCred()
	if err == nil {
		err = relaywire.CheckPeer(cred, "the witness relay", p.UID, p.GID, "--audit-relay-uid, --audit-relay-gid")
	}
	if err == nil {
		err = c.Write(relaywire.Hello(role), time.Now().Add(dialWait))
	}
	if err == nil {
		c.Unix().SetReadDeadline(time.Now().Add(dialWait))
		var f relaywire.Frame
		if f, err = c.Read(relaywire.TypeWelcome); err == nil && f.U32(0) != relaywire.Version {
			err = fmt.Errorf("relay speaks version %d, this sidecar %d", f.U32(0), relaywire.Version)
		}
	}
	if err != nil {
		c.Close()
		return nil, down(err)
	}
	c.Unix().SetReadDeadline(time.Time{})
	return c, nil
}

// Control is the relay's control connection: the kernel's audit status and
// rules, one request at a time. Once its connection fails every call
// returns ErrDown.
type Control struct {
	mu     sync.Mutex
	c      *relaywire.Conn
	broken error
}

// DialControl connects a control connection.
func DialControl(p Peer) (*Control, error) {
	c, err := dial(p, relaywire.RoleControl)
	if err != nil {
		return nil, err
	}
	return &Control{c: c}, nil
}

// request sends frame and reads replies of type reply (each is given to
// each) up to the done frame.
func (k *Control) request(frame []byte, reply relaywire.Type, each func([]byte) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.broken != nil {
		return k.broken
	}
	deadline := time.Now().Add(requestWait)
	err := k.c.Write(frame, deadline)
	if err == nil {
		err = k.c.Unix().SetReadDeadline(deadline)
	}
	for n := 0; err == nil; n++ {
		var f relaywire.Frame
		if f, err = k.c.Read(reply, relaywire.TypeDone); err != nil {
			break
		}
		if f.Type == relaywire.TypeDone {
			errno, msg, err := relaywire.ParseDone(f)
			switch {
			case err != nil:
			case errno != 0:
				return syscall.Errno(errno)
			case msg != "":
				return errors.New("witness relay: " + msg)
			default:
				return nil
			}
			return k.fail(err)
		}
		if n >= auditnetlink.MaxListed {
			err = fmt.Errorf("more than %d replies", auditnetlink.MaxListed)
			break
		}
		if cerr := each(f.Body); cerr != nil {
			err = cerr
		}
	}
	return k.fail(err)
}

// fail ends the connection: a reply stream that went wrong cannot be
// resynchronised.
func (k *Control) fail(err error) error {
	k.broken = down(err)
	k.c.Close()
	return k.broken
}

// Status is the kernel's audit status.
func (k *Control) Status() (auditnetlink.Status, error) {
	var st auditnetlink.Status
	got := false
	err := k.request(relaywire.Encode(relaywire.TypeStatus), relaywire.TypeStatusReply, func(b []byte) (err error) {
		if got {
			return errors.New("two status replies")
		}
		got = true
		st, err = auditnetlink.ParseStatus(b)
		return err
	})
	if err == nil && !got {
		err = errors.New("witness relay: the status request was done without a status")
	}
	return st, err
}

// Set changes auditing's enabled flag or the backlog limit.
func (k *Control) Set(mask, enabled, backlogLimit uint32) error {
	return k.request(relaywire.Encode(relaywire.TypeSet, mask, enabled, backlogLimit), relaywire.TypeDone, nil)
}

func (k *Control) rule(t relaywire.Type, rule []byte) error {
	f, err := relaywire.EncodeBytes(t, rule)
	if err != nil {
		return err
	}
	return k.request(f, relaywire.TypeDone, nil)
}

// AddRule adds a rule (struct audit_rule_data's bytes).
func (k *Control) AddRule(rule []byte) error { return k.rule(relaywire.TypeAddRule, rule) }

// DelRule removes a rule (struct audit_rule_data's bytes).
func (k *Control) DelRule(rule []byte) error { return k.rule(relaywire.TypeDelRule, rule) }

// ListRules is the kernel's rules, each as its bytes.
func (k *Control) ListRules() ([][]byte, error) {
	var rules [][]byte
	err := k.request(relaywire.Encode(relaywire.TypeListRules), relaywire.TypeRule, func(b []byte) error {
		rules = append(rules, append([]byte(nil), b...))
		return nil
	})
	return rules, err
}

// Close ends the connection.
func (k *Control) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.broken == nil {
		k.broken = down(errors.New("closed"))
	}
	return k.c.Close()
}

// Records is the relay's records connection.
type Records struct {
	c       *relaywire.Conn
	settled time.Time // the last idle frame's instant
}

// DialRecords connects a records connection.
func DialRecords(p Peer) (*Records, error) {
	c, err := dial(p, relaywire.RoleRecords)
	if err != nil {
		return nil, err
	}
	return &Records{c: c}, nil
}

// OverrunError is records dropped before they reached the sidecar (the
// kernel's multicast buffer, or the relay's queue): Count datagrams, or
// buffer overflows. It is an auditnetlink.ErrOverrun.
type OverrunError struct{ Count uint64 }

func (e *OverrunError) Error() string {
	return fmt.Sprintf("audit: %d overruns before the witness relay's records reached the sidecar", e.Count)
}

func (e *OverrunError) Unwrap() error { return auditnetlink.ErrOverrun }

// Read waits up to timeout for one datagram, copied into buf; nil when
// none came.
func (r *Records) Read(buf []byte, timeout time.Duration) ([]byte, error) {
	r.c.Unix().SetReadDeadline(time.Now().Add(timeout))
	f, err := r.c.Read(relaywire.TypeRecord, relaywire.TypeOverrun, relaywire.TypeIdle)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, nil
	case err != nil:
		return nil, down(err)
	case f.Type == relaywire.TypeIdle:
		if at := relaywire.ParseIdle(f); at.After(r.settled) {
			r.settled = at
		}
		return nil, nil
	case f.Type == relaywire.TypeOverrun:
		return nil, &OverrunError{Count: uint64(f.U32(0))}
	case len(f.Body) > len(buf):
		return nil, down(fmt.Errorf("a record of %d bytes, the reader holds %d", len(f.Body), len(buf)))
	}
	return buf[:copy(buf, f.Body)], nil
}

// Settled is the last instant the relay found the kernel's socket empty,
// having sent every record it read before: records the kernel sent after
// it may be lost if the connection ends now. Zero until the first idle
// frame. Not safe for use beside Read.
func (r *Records) Settled() time.Time { return r.settled }

// Close ends the connection.
func (r *Records) Close() error { return r.c.Close() }
