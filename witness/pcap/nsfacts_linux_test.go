package pcap

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestReadNsFactsReadsItsOwn: what the check rests on is read from the
// running system: the kernel's release (from /proc, not uname(2)) and the
// process's own network and PID namespaces (device and inode of their
// nsfs files), so the decision is about where serve runs, not about zero
// values.
func TestReadNsFactsReadsItsOwn(t *testing.T) {
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Skipf("the kernel's release cannot be read from /proc: %v", err)
	}
	want := kernelVersion(strings.TrimSpace(string(release)))
	if want == ([2]int{}) {
		t.Fatalf("the test cannot parse the kernel release %q", release)
	}
	stat := func(path string) nsFile {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Skipf("the process's namespaces cannot be read: %v", err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return nsFile{dev: uint64(st.Dev), ino: st.Ino}
	}
	net, pid := stat("/proc/self/ns/net"), stat("/proc/self/ns/pid")
	f := readNsFacts()
	if f.selfErr != nil {
		t.Fatalf("readNsFacts: %v", f.selfErr)
	}
	if f.kernel != want {
		t.Errorf("kernel %v, want %v (%s)", f.kernel, want, strings.TrimSpace(string(release)))
	}
	if f.net != net || f.pid != pid {
		t.Errorf("namespaces net %+v pid %+v, want net %+v pid %+v", f.net, f.pid, net, pid)
	}
}

// TestAtLeast: a kernel is at least 6.18 by its major number first, then
// its minor one: 6.17 is before the fixed inode number, 7.0 after.
func TestAtLeast(t *testing.T) {
	for _, c := range []struct {
		v    [2]int
		want bool
	}{
		{[2]int{6, 17}, false}, {[2]int{6, 18}, true}, {[2]int{6, 19}, true},
		{[2]int{5, 99}, false}, {[2]int{7, 0}, true}, {[2]int{}, false},
	} {
		if got := atLeast(c.v, fixedNetInoKernel); got != c.want {
			t.Errorf("atLeast(%v, %v) = %v, want %v", c.v, fixedNetInoKernel, got, c.want)
		}
	}
}
