package testutil

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// OpenFDs counts this process's open fds.
func OpenFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// WaitForFDs waits until this process has at most base fds open: closes by
// other goroutines (the agent's connection handlers) land asynchronously.
func WaitForFDs(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(FailAfter)
	for OpenFDs(t) > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d fds open, %d at the start: leaked %s", OpenFDs(t), base, ListFDs())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ListFDs describes every open fd and its target, for failure messages.
func ListFDs() string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var b strings.Builder
	for _, e := range ents {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		fmt.Fprintf(&b, "%s→%s ", e.Name(), target)
	}
	return b.String()
}

// FDsPointingAt lists this process's fds whose target is path.
func FDsPointingAt(t testing.TB, path string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == path {
			fds = append(fds, e.Name())
		}
	}
	return fds
}

// LeakCheck records fds and goroutines now and, at cleanup, waits until both
// are back to where they were. The garbage collector is off meanwhile: an
// unreachable *os.File's finalizer would close a leaked fd and hide the leak.
func LeakCheck(t testing.TB) {
	t.Helper()
	runtime.GC()
	gcPercent := debug.SetGCPercent(-1)
	baseFD, baseG := OpenFDs(t), runtime.NumGoroutine()
	t.Cleanup(func() {
		defer debug.SetGCPercent(gcPercent)
		deadline := time.Now().Add(FailAfter)
		for OpenFDs(t) > baseFD || runtime.NumGoroutine() > baseG {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Fatalf("leak: %d fds (was %d): %s; %d goroutines (was %d):\n%s", OpenFDs(t), baseFD, ListFDs(),
					runtime.NumGoroutine(), baseG, buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// DevNull opens /dev/null for reading, closed at cleanup: an fd to send.
func DevNull(t testing.TB) *os.File {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// SeqpacketPair returns both ends of a SOCK_SEQPACKET socketpair as UnixConns.
func SeqpacketPair(t testing.TB) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close() // FileConn dups it
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}
