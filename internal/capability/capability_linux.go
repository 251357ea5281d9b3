// Package capability reads and changes this process's Linux capability
// sets: whether one is effective, lowering one from every thread's
// effective set while keeping it permitted, and raising it on one locked
// thread for a single call. The sidecar holds NET_ADMIN only for the
// loopback guard's socket filter (broker/ingress_linux.go) this way.
package capability

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Names of the capabilities this project asks for, for messages.
var names = map[int]string{unix.CAP_NET_ADMIN: "NET_ADMIN", unix.CAP_NET_RAW: "NET_RAW"}

func name(c int) string {
	if n, ok := names[c]; ok {
		return n
	}
	return fmt.Sprintf("capability %d", c)
}

// sets are the calling thread's three capability sets.
type sets struct {
	hdr  unix.CapUserHeader
	data [2]unix.CapUserData
}

func current() (*sets, error) {
	s := &sets{hdr: unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}}
	if err := unix.Capget(&s.hdr, &s.data[0]); err != nil {
		return nil, fmt.Errorf("capget: %w", err)
	}
	return s, nil
}

func (s *sets) has(c int, set func(*unix.CapUserData) uint32) bool {
	return set(&s.data[c/32])&(1<<(uint(c)%32)) != 0
}

func effective(d *unix.CapUserData) uint32 { return d.Effective }
func permitted(d *unix.CapUserData) uint32 { return d.Permitted }

// Effective reports whether the calling thread has c in its effective set.
func Effective(c int) bool {
	s, err := current()
	return err == nil && s.has(c, effective)
}

// Permitted reports whether the calling thread may raise c.
func Permitted(c int) bool {
	s, err := current()
	return err == nil && s.has(c, permitted)
}

// LowerEverywhere takes c out of the effective set of every thread of the
// process and keeps it permitted, so that only WithRaised uses it. Threads
// the runtime starts later are cloned with the lowered set. It needs a
// binary without cgo (syscall.AllThreadsSyscall); with cgo it returns an
// error that says so and changes nothing.
func LowerEverywhere(c int) error {
	s, err := current()
	if err != nil {
		return err
	}
	if !s.has(c, effective) {
		return nil
	}
	s.data[c/32].Effective &^= 1 << (uint(c) % 32)
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&s.hdr)), uintptr(unsafe.Pointer(&s.data[0])), 0)
	if errno != 0 {
		return fmt.Errorf("lower %s on every thread: %w", name(c), errno)
	}
	return nil
}

// WithRaised runs f on a thread locked for the call with c effective, then
// lowers it again. If c is effective already, f just runs. Lowering an
// effective capability that is permitted cannot fail in practice; if it
// does, the thread stays locked to the calling goroutine (the runtime ends
// it with that goroutine) instead of going back to the pool with c
// effective, and the error says so.
func WithRaised(c int, f func() error) error {
	runtime.LockOSThread()
	s, err := current()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	if s.has(c, effective) {
		runtime.UnlockOSThread()
		return f()
	}
	if !s.has(c, permitted) {
		runtime.UnlockOSThread()
		return fmt.Errorf("%s is not in the permitted set", name(c))
	}
	raised := *s
	raised.data[c/32].Effective |= 1 << (uint(c) % 32)
	if err := unix.Capset(&raised.hdr, &raised.data[0]); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("raise %s: %w", name(c), err)
	}
	ferr := f()
	if err := unix.Capset(&s.hdr, &s.data[0]); err != nil {
		// Deliberately still locked: see the doc comment.
		return fmt.Errorf("lower %s after use: %w", name(c), err)
	}
	runtime.UnlockOSThread()
	return ferr
}
