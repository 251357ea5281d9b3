package audit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"golang.org/x/sys/unix"
)

// The audit netlink (NETLINK_AUDIT), the parts the witness uses: the
// kernel's status (AUDIT_GET), rules (AUDIT_ADD_RULE, AUDIT_DEL_RULE,
// AUDIT_LIST_RULES), and the enabled flag and backlog limit (AUDIT_SET
// with only those mask bits: never AUDIT_STATUS_PID, which would make the
// witness the audit daemon and displace a host auditd). Records are read
// on a second socket bound to the read-only multicast group (events.go).
// Every wait is bounded (replyTimeout) and every reply is bounded in size
// and count.

const (
	replyTimeout = 2 * time.Second
	maxReply     = 1 << 16
	// maxListed bounds the rules one AUDIT_LIST_RULES may return.
	maxListed = 1 << 14

	statusEnabled = 0x1  // AUDIT_STATUS_ENABLED
	statusBacklog = 0x10 // AUDIT_STATUS_BACKLOG_LIMIT
	// nlgrpReadlog is AUDIT_NLGRP_READLOG, the read-only multicast group
	// (CAP_AUDIT_READ).
	nlgrpReadlog = 1
)

// status is the part of struct audit_status the witness reads.
type status struct {
	Enabled, Failure, PID, RateLimit, BacklogLimit, Lost, Backlog uint32
}

// control is a request socket to the kernel's audit netlink.
type control struct {
	fd  int
	seq uint32
}

func openControl() (*control, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, fmt.Errorf("audit: open the audit netlink: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: bind the audit netlink: %w", err)
	}
	tv := unix.NsecToTimeval(int64(replyTimeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: set the reply timeout: %w", err)
	}
	return &control{fd: fd}, nil
}

func (c *control) Close() error { return unix.Close(c.fd) }

// send sends one request and returns its sequence number.
func (c *control) send(typ uint16, flags uint16, payload []byte) (uint32, error) {
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
// error arrives, or replyTimeout passes.
func (c *control) receive(seq uint32, each func(m syscall.NetlinkMessage) (done bool, err error)) error {
	buf := make([]byte, maxReply)
	deadline := time.Now().Add(replyTimeout)
	for count := 0; count < maxListed+2; {
		if time.Now().After(deadline) {
			return fmt.Errorf("audit: no reply within %v", replyTimeout)
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
func (c *control) do(typ uint16, payload []byte) error {
	seq, err := c.send(typ, unix.NLM_F_ACK, payload)
	if err != nil {
		return err
	}
	return c.receive(seq, func(syscall.NetlinkMessage) (bool, error) { return false, nil })
}

// status asks the kernel for its audit status.
func (c *control) status() (status, error) {
	var st status
	seq, err := c.send(unix.AUDIT_GET, 0, nil)
	if err != nil {
		return st, err
	}
	err = c.receive(seq, func(m syscall.NetlinkMessage) (bool, error) {
		if m.Header.Type != unix.AUDIT_GET {
			return false, nil
		}
		if len(m.Data) < 32 {
			return true, errors.New("audit: short status reply")
		}
		ne := binary.NativeEndian
		st = status{Enabled: ne.Uint32(m.Data[4:]), Failure: ne.Uint32(m.Data[8:]), PID: ne.Uint32(m.Data[12:]),
			RateLimit: ne.Uint32(m.Data[16:]), BacklogLimit: ne.Uint32(m.Data[20:]), Lost: ne.Uint32(m.Data[24:]), Backlog: ne.Uint32(m.Data[28:])}
		return true, nil
	})
	return st, err
}

// set changes the kernel's enabled flag or backlog limit (mask says
// which); never the daemon pid.
func (c *control) set(mask, enabled, backlogLimit uint32) error {
	if mask&^(statusEnabled|statusBacklog) != 0 {
		panic("audit: set may change only enabled and the backlog limit")
	}
	p := make([]byte, 40)
	ne := binary.NativeEndian
	ne.PutUint32(p[0:], mask)
	ne.PutUint32(p[4:], enabled)
	ne.PutUint32(p[20:], backlogLimit)
	return c.do(unix.AUDIT_SET, p)
}

func (c *control) addRule(d ruleData) error { return c.do(unix.AUDIT_ADD_RULE, d.marshal()) }
func (c *control) delRule(d ruleData) error { return c.do(unix.AUDIT_DEL_RULE, d.marshal()) }

// listRules returns the kernel's syscall rules.
func (c *control) listRules() ([]ruleData, error) {
	seq, err := c.send(unix.AUDIT_LIST_RULES, 0, nil)
	if err != nil {
		return nil, err
	}
	var rules []ruleData
	err = c.receive(seq, func(m syscall.NetlinkMessage) (bool, error) {
		switch m.Header.Type {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.AUDIT_LIST_RULES:
			d, err := unmarshalRuleData(m.Data)
			if err != nil {
				return true, err
			}
			rules = append(rules, d)
		}
		return false, nil
	})
	return rules, err
}

// multicast is a socket bound to the read-only log group.
type multicast struct{ fd int }

// mcastBuffer is the socket's receive buffer: records queue there while
// the reader writes files; past it the kernel drops them (ENOBUFS, a gap).
const mcastBuffer = 8 << 20

func openMulticast() (*multicast, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, fmt.Errorf("audit: open the audit netlink: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, mcastBuffer); err != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, mcastBuffer)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (nlgrpReadlog - 1)}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("audit: join the read-only log group (CAP_AUDIT_READ is needed): %w", err)
	}
	return &multicast{fd: fd}, nil
}

// errOverrun is a read that found records dropped because the socket's
// buffer was full.
var errOverrun = errors.New("audit: the multicast buffer overflowed; records were dropped")

// read waits up to timeout for records and returns the bytes of one
// datagram (several netlink messages may share it), nil when none came.
func (m *multicast) read(buf []byte, timeout time.Duration) ([]byte, error) {
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
		return nil, errOverrun
	case errors.Is(err, unix.EAGAIN), safefs.Interrupted(err):
		return nil, nil
	case err != nil:
		return nil, os.NewSyscallError("recvfrom", err)
	}
	return buf[:n], nil
}

func (m *multicast) Close() error { return unix.Close(m.fd) }
