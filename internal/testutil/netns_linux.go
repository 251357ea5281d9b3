package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The network-namespace helpers of the root suites (the pcap witness, the
// disk states, the spoofed pre-authentication flood): namespaces made with
// ip(8) and code run inside them.

// AddNetns makes the network namespace name with its loopback up and
// removes it at cleanup. It skips the test, saying why, where namespaces
// cannot be made (not root, no ip(8), not permitted).
func AddNetns(t testing.TB, name string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (Debian iproute2) to make network namespaces")
	}
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("network namespaces are not permitted here: ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	IP(t, "-n", name, "link", "set", "lo", "up")
}

// IP runs ip(8) with args and fails the test, with its output, if it fails.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// RunInNetns runs f on an OS thread joined to the network namespace ns
// (the caller's when ns is ""); sockets f opens stay in ns and may be used
// from any thread afterwards. The thread is locked and never unlocked, so
// Go discards it instead of reusing a thread in the wrong namespace.
func RunInNetns(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if ns != "" {
			fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				errc <- err
				return
			}
			defer unix.Close(fd)
			if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
				errc <- fmt.Errorf("setns %s: %w", ns, err)
				return
			}
		}
		errc <- f()
	}()
	return <-errc
}

// InNetns is RunInNetns that fails the test when joining ns or f fails.
func InNetns(t testing.TB, ns string, f func() error) {
	t.Helper()
	if err := RunInNetns(ns, f); err != nil {
		t.Fatalf("in network namespace %s: %v", ns, err)
	}
}
