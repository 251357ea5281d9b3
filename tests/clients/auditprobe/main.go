// Command auditprobe asks the kernel's audit netlink the two questions that
// decide which audit capabilities a container can use, and prints one line
// for each:
//
//	multicast=ok|<error>   bind the read-only multicast group (AUDIT_NLGRP_READLOG; CAP_AUDIT_READ)
//	status=ok|<error>      AUDIT_GET, the status request the rule messages share their check with (CAP_AUDIT_CONTROL)
//
// It is for tests/compose, run in a container shaped like the sidecar. It
// loads and changes nothing.
//
// With -tamper it is what root in the workload would try against the
// audit witness, and prints one line for each attempt, which must fail:
//
//	disable=<error>    turn the kernel's auditing off (AUDIT_SET enabled=0)
//	list=<error>       list the rules, the first step to deleting them
//	delete=<error>     delete every rule (AUDIT_DEL_RULE of each listed; tried with an
//	                   empty rule when the listing was refused)
//	loginuid=<error>   write its own loginuid again, to move to another audit session
//
// "ok" on any line is a hole in the boundary.
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/auditnetlink"
)

const (
	auditGet          = 1000 // AUDIT_GET, linux/audit.h
	auditNlgrpReadlog = 1    // AUDIT_NLGRP_READLOG
	replyTimeout      = 2 * time.Second
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-tamper" {
		tamper()
		return
	}
	fmt.Println("multicast=" + result(bindMulticast()))
	fmt.Println("status=" + result(status()))
}

func tamper() {
	c, err := auditnetlink.OpenControl()
	if err != nil {
		fmt.Println("open=" + err.Error())
		return
	}
	defer c.Close()
	fmt.Println("disable=" + result(c.Set(auditnetlink.StatusEnabled, 0, 0)))
	rules, err := c.ListRules()
	fmt.Println("list=" + result(err))
	if len(rules) == 0 {
		rules = [][]byte{make([]byte, 1040)}
	}
	var del error
	for _, r := range rules {
		if err := c.DelRule(r); err != nil {
			del = err
		}
	}
	fmt.Println("delete=" + result(del))
	fmt.Println("loginuid=" + result(os.WriteFile("/proc/self/loginuid", []byte("0"), 0)))
}

func result(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

func openAudit(groups uint32) (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groups}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind: %w", err)
	}
	return fd, nil
}

func bindMulticast() error {
	fd, err := openAudit(1 << (auditNlgrpReadlog - 1))
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// status sends AUDIT_GET with an ack request; the kernel answers with the
// status or an error message carrying the errno.
func status() error {
	fd, err := openAudit(0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	msg := make([]byte, unix.NLMSG_HDRLEN)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], auditGet)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	tv := unix.NsecToTimeval(replyTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("recv: %w", err)
	}
	if n < unix.NLMSG_HDRLEN+4 {
		return fmt.Errorf("short reply (%d bytes)", n)
	}
	if binary.NativeEndian.Uint16(buf[4:]) != unix.NLMSG_ERROR {
		return nil // the status itself
	}
	if errno := -int32(binary.NativeEndian.Uint32(buf[unix.NLMSG_HDRLEN:])); errno != 0 {
		return unix.Errno(errno)
	}
	return nil
}
