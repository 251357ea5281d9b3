package capability

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// effectiveOnEveryThread reads each thread's CapEff from /proc and reports
// the threads that have c effective.
func effectiveOnEveryThread(t *testing.T, c int) (holding []string, threads int) {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("list threads: %v (%d)", err, len(tasks))
	}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended meanwhile
		}
		threads++
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
				mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil {
					t.Fatalf("%s: CapEff %q: %v", p, v, err)
				}
				if mask&(1<<uint(c)) != 0 {
					holding = append(holding, p)
				}
			}
		}
	}
	return holding, threads
}

// TestLowerEverywhereThenRaiseOnOneThread: after LowerEverywhere no thread
// of the process has NET_ADMIN effective, it stays permitted, WithRaised
// makes it effective for its call only, and a setsockopt that needs it
// fails outside the call and succeeds inside.
func TestLowerEverywhereThenRaiseOnOneThread(t *testing.T) {
	if os.Geteuid() != 0 || !Effective(unix.CAP_NET_ADMIN) {
		t.Skip("needs root with NET_ADMIN effective: the test lowers and raises it")
	}
	// Several threads exist before the lowering: goroutines parked in
	// blocking syscalls each hold one.
	var wg sync.WaitGroup
	fds := make([][2]int, 4)
	for i := range fds {
		if err := unix.Pipe(fds[i][:]); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b [1]byte
			unix.Read(fds[i][0], b[:])
		}()
	}
	defer func() {
		for _, p := range fds {
			unix.Write(p[1], []byte{0})
		}
		wg.Wait()
		for _, p := range fds {
			unix.Close(p[0])
			unix.Close(p[1])
		}
	}()

	err := LowerEverywhere(unix.CAP_NET_ADMIN)
	if errors.Is(err, syscall.ENOTSUP) {
		t.Skip("this test binary links cgo: AllThreadsSyscall is unavailable")
	}
	if err != nil {
		t.Fatal(err)
	}
	if holding, n := effectiveOnEveryThread(t, unix.CAP_NET_ADMIN); len(holding) > 0 {
		t.Fatalf("%d of %d threads still have NET_ADMIN effective: %v", len(holding), n, holding)
	}
	if Effective(unix.CAP_NET_ADMIN) || !Permitted(unix.CAP_NET_ADMIN) {
		t.Fatalf("after LowerEverywhere: effective %v, permitted %v; want false, true",
			Effective(unix.CAP_NET_ADMIN), Permitted(unix.CAP_NET_ADMIN))
	}
	// A change that needs NET_ADMIN: the receive buffer past rmem_max
	// (SO_RCVBUFFORCE).
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	force := func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 1<<20) }
	if err := force(); !errors.Is(err, unix.EPERM) {
		t.Fatalf("SO_RCVBUFFORCE with NET_ADMIN lowered: %v, want EPERM", err)
	}
	var inside bool
	if err := WithRaised(unix.CAP_NET_ADMIN, func() error { inside = Effective(unix.CAP_NET_ADMIN); return force() }); err != nil {
		t.Fatalf("SO_RCVBUFFORCE with NET_ADMIN raised: %v", err)
	}
	if !inside {
		t.Error("NET_ADMIN was not effective inside WithRaised")
	}
	if holding, n := effectiveOnEveryThread(t, unix.CAP_NET_ADMIN); len(holding) > 0 {
		t.Fatalf("after WithRaised, %d of %d threads have NET_ADMIN effective: %v", len(holding), n, holding)
	}
}

// TestWithRaisedNeedsPermitted: a capability not permitted is refused by
// name, and f does not run. The test's thread gives up NET_ADMIN for good
// and stays locked, so the runtime ends that thread with the test.
func TestWithRaisedNeedsPermitted(t *testing.T) {
	runtime.LockOSThread() // never unlocked: see above
	if Permitted(unix.CAP_NET_ADMIN) {
		s, err := current()
		if err != nil {
			t.Fatal(err)
		}
		s.data[0].Effective &^= 1 << unix.CAP_NET_ADMIN
		s.data[0].Permitted &^= 1 << unix.CAP_NET_ADMIN
		if err := unix.Capset(&s.hdr, &s.data[0]); err != nil {
			t.Fatalf("drop NET_ADMIN from this thread: %v", err)
		}
	}
	ran := false
	err := WithRaised(unix.CAP_NET_ADMIN, func() error { ran = true; return nil })
	if err == nil || !strings.Contains(err.Error(), "NET_ADMIN is not in the permitted set") || ran {
		t.Fatalf("WithRaised without NET_ADMIN permitted: err %v, ran %v", err, ran)
	}
}
