package auditnetlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
)

const (
	// ReplyTimeout bounds every wait for the kernel's reply.
	ReplyTimeout = 2 * time.Second
	// MaxReply bounds one reply datagram, and so one listed rule.
	MaxReply = 1 << 16
	// MaxListed bounds the rules one AUDIT_LIST_RULES may return.
	MaxListed = 1 << 14
	// nlgrpReadlog is AUDIT_NLGRP_READLOG, the read-only multicast group
	// (CAP_AUDIT_READ).
	nlgrpReadlog = 1
)

// Control is a request socket to the kernel's audit netlink. It is not
// safe for concurrent use: one request at a time.
type Control struct {
	fd  int
	seq uint32
}

// OpenControl opens a request socket. Opening needs no capability; the
// kernel checks CAP_AUDIT_CONTROL (and the namespaces) per request.
func OpenControl() (*Control, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, fmt.Errorf("audit: open the audit netlink: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: bind the audit netlink: %w", err)
	}
	tv := unix.NsecToTimeval(int64(ReplyTimeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: set the reply timeout: %w", err)
	}
	return &Control{fd: fd}, nil
}

// Close closes the socket.
func (c *Control) Close() error { return unix.Close(c.fd) }

// send sends one request and returns its sequence number.
func (c *Control) send(typ uint16, flags uint16, payload []byte) (uint32, error) {
	c.seq++
	msg := make([]byte, unix.NLMSG_HDRLEN+len(payload))
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], typ)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST|flags)
	ne.PutUint32(msg[8:], c.seq)
	copy(msg[unix.NLMSG_HDRLEN:], payload)
	if err := safefs.RetryEINTR(func() error {
		return unix.Sendto(c.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	}); err != nil {
		return 0, fmt.Errorf("audit: send request %d: %w", typ, err)
	}
	return c.seq, nil
}

// receive calls each with the replies to seq until it returns done, an
// error arrives, or ReplyTimeout passes. The kernel's refusal is returned
// as its syscall.Errno, so callers can tell EEXIST and ENOENT.
func (c *Control) receive(seq uint32, each func(m syscall.NetlinkMessage) (done bool, err error)) error {
	buf := make([]byte, MaxReply)
	deadline := time.Now().Add(ReplyTimeout)
	for count := 0; count < MaxListed+2; {
		if time.Now().After(deadline) {
			return fmt.Errorf("audit: no reply within %v", ReplyTimeout)
		}
		var n int
		err := safefs.RetryEINTR(func() (err error) { n, _, err = unix.Recvfrom(c.fd, buf, 0); return err })
		if err != nil {
			return fmt.Errorf("audit: read reply: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("audit: malformed reply: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			count++
			if m.Header.Type == unix.NLMSG_ERROR {
				if len(m.Data) < 4 {
					return errors.New("audit: short error reply")
				}
				if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
					return syscall.Errno(-errno)
				}
				return nil // the acknowledgement
			}
			done, err := each(m)
			if err != nil || done {
				return err
			}
		}
	}
	return errors.New("audit: too many replies")
}

// do sends a request that wants only the kernel's acknowledgement.
func (c *Control) do(typ uint16, payload []byte) error {
	seq, err := c.send(typ, unix.NLM_F_ACK, payload)
	if err != nil {
		return err
	}
	return c.receive(seq, func(syscall.NetlinkMessage) (bool, error) { return false, nil })
}

// StatusBytes asks the kernel for its audit status and returns the reply's
// body as the kernel sent it (ParseStatus reads it).
func (c *Control) StatusBytes() ([]byte, error) {
	seq, err := c.send(unix.AUDIT_GET, 0, nil)
	if err != nil {
		return nil, err
	}
	var body []byte
	err = c.receive(seq, func(m syscall.NetlinkMessage) (bool, error) {
		if m.Header.Type != unix.AUDIT_GET {
			return false, nil
		}
		body = append([]byte(nil), m.Data...)
		return true, nil
	})
	if err == nil && body == nil {
		err = errors.New("audit: the kernel acknowledged the status request without a status")
	}
	return body, err
}

// Status asks the kernel for its audit status.
func (c *Control) Status() (Status, error) {
	b, err := c.StatusBytes()
	if err != nil {
		return Status{}, err
	}
	return ParseStatus(b)
}

// Set changes the kernel's enabled flag or backlog limit (mask says
// which); never the daemon pid.
func (c *Control) Set(mask, enabled, backlogLimit uint32) error {
	p, err := setPayload(mask, enabled, backlogLimit)
	if err != nil {
		return err
	}
	return c.do(unix.AUDIT_SET, p)
}

// AddRule adds a rule given as struct audit_rule_data's bytes.
func (c *Control) AddRule(rule []byte) error { return c.do(unix.AUDIT_ADD_RULE, rule) }

// DelRule removes a rule given as struct audit_rule_data's bytes.
func (c *Control) DelRule(rule []byte) error { return c.do(unix.AUDIT_DEL_RULE, rule) }

// ListRules returns the kernel's rules, each as its struct
// audit_rule_data's bytes.
func (c *Control) ListRules() ([][]byte, error) {
	seq, err := c.send(unix.AUDIT_LIST_RULES, 0, nil)
	if err != nil {
		return nil, err
	}
	var rules [][]byte
	err = c.receive(seq, func(m syscall.NetlinkMessage) (bool, error) {
		switch m.Header.Type {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.AUDIT_LIST_RULES:
			rules = append(rules, append([]byte(nil), m.Data...))
		}
		return false, nil
	})
	return rules, err
}

// Multicast is a socket bound to the read-only log group.
type Multicast struct{ fd int }

// MulticastBuffer is the socket's receive buffer asked for: records queue
// there while the reader is busy; past it the kernel drops them (ENOBUFS,
// ErrOverrun). Without CAP_NET_ADMIN the kernel caps it at
// net.core.rmem_max.
const MulticastBuffer = 8 << 20

// OpenMulticast joins the read-only log group (CAP_AUDIT_READ).
func OpenMulticast() (*Multicast, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, fmt.Errorf("audit: open the audit netlink: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, MulticastBuffer); err != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, MulticastBuffer)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (nlgrpReadlog - 1)}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: join the read-only log group (CAP_AUDIT_READ is needed): %w", err)
	}
	return &Multicast{fd: fd}, nil
}

// ErrOverrun is a read that found records dropped because the socket's
// buffer was full.
var ErrOverrun = errors.New("audit: the multicast buffer overflowed; records were dropped")

// Read waits up to timeout for records and returns the bytes of one
// datagram (several netlink messages may share it), nil when none came.
func (m *Multicast) Read(buf []byte, timeout time.Duration) ([]byte, error) {
	fds := []unix.PollFd{{Fd: int32(m.fd), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, int(timeout/time.Millisecond)); err != nil && !safefs.Interrupted(err) {
		return nil, os.NewSyscallError("poll", err)
	}
	if fds[0].Revents == 0 {
		return nil, nil
	}
	n, _, err := unix.Recvfrom(m.fd, buf, unix.MSG_DONTWAIT)
	switch {
	case errors.Is(err, unix.ENOBUFS):
		return nil, ErrOverrun
	case errors.Is(err, unix.EAGAIN), safefs.Interrupted(err):
		return nil, nil
	case err != nil:
		return nil, os.NewSyscallError("recvfrom", err)
	}
	return buf[:n], nil
}

// Close closes the socket.
func (m *Multicast) Close() error { return unix.Close(m.fd) }
