package pcap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestClassifyNetns: the decision on every combination of what the check
// reads: the fixed inode answers on 6.18 and later; before, the initial
// PID namespace compares with kthreadd's or init's namespace, a PID
// namespace of its own (a container) is taken to have a network of its
// own, and what cannot be read is unknown.
func TestClassifyNetns(t *testing.T) {
	initNet := nsFile{dev: 4, ino: initNetNsIno}
	initPID := nsFile{dev: 4, ino: initPIDNsIno}
	other := nsFile{dev: 4, ino: 0xF0000123}
	otherPID := nsFile{dev: 4, ino: 0xF0000456}
	oldInit := nsFile{dev: 4, ino: 0xF0000098} // the initial namespace's number before 6.18
	denied := errors.New("permission denied")
	for _, c := range []struct {
		name  string
		f     nsFacts
		want  Netns
		basis string
	}{
		{"6.18, the initial namespace", nsFacts{kernel: [2]int{6, 18}, net: initNet, pid: initPID, hostErr: denied}, NetnsInitial, "the initial namespace's inode number"},
		{"6.18, a namespace of its own", nsFacts{kernel: [2]int{6, 18}, net: other, pid: initPID, hostErr: denied}, NetnsOwn, "not the initial namespace's"},
		{"7.0, a container's namespace", nsFacts{kernel: [2]int{7, 0}, net: other, pid: otherPID}, NetnsOwn, "not the initial namespace's"},
		{"6.18, a container with the host's network", nsFacts{kernel: [2]int{6, 18}, net: initNet, pid: otherPID}, NetnsInitial, "the initial namespace's inode number"},
		{"5.15, the initial namespace, kthreadd's", nsFacts{kernel: [2]int{5, 15}, net: oldInit, pid: initPID, hostNet: oldInit, hostWho: "kthreadd's (pid 2)"}, NetnsInitial, "is kthreadd's (pid 2)"},
		{"5.15, a namespace of its own", nsFacts{kernel: [2]int{5, 15}, net: other, pid: initPID, hostNet: oldInit, hostWho: "kthreadd's (pid 2)"}, NetnsOwn, "is not kthreadd's (pid 2)"},
		{"5.15, same inode on another device", nsFacts{kernel: [2]int{5, 15}, net: nsFile{dev: 5, ino: oldInit.ino}, pid: initPID, hostNet: oldInit, hostWho: "init's (pid 1)"}, NetnsOwn, "is not init's (pid 1)"},
		{"5.15, the host's processes unreadable", nsFacts{kernel: [2]int{5, 15}, net: oldInit, pid: initPID, hostErr: denied}, NetnsUnknown, "permission denied"},
		{"5.15, a container", nsFacts{kernel: [2]int{5, 15}, net: other, pid: otherPID, hostNet: other, hostWho: "init's (pid 1)"}, NetnsOwn, "a PID namespace of its own"},
		{"unknown kernel, a container", nsFacts{net: other, pid: otherPID}, NetnsOwn, "a PID namespace of its own"},
		{"its own namespaces unreadable", nsFacts{kernel: [2]int{6, 18}, selfErr: denied}, NetnsUnknown, "its namespaces cannot be read"},
	} {
		got := classifyNetns(c.f)
		if got.Netns != c.want || !strings.Contains(got.Basis, c.basis) {
			t.Errorf("%s: %d (%s); want %d, saying %q", c.name, got.Netns, got.Basis, c.want, c.basis)
		}
	}
}

func TestKernelVersion(t *testing.T) {
	for release, want := range map[string][2]int{
		"6.18.44-fc-v1098": {6, 18}, "5.4.0-100-generic": {5, 4}, "6.1": {6, 1}, "6.19-rc1": {6, 19},
		"7.0.0": {7, 0}, "4": {}, "x.y": {}, "": {},
	} {
		if got := kernelVersion(release); got != want {
			t.Errorf("kernelVersion(%q) = %v, want %v", release, got, want)
		}
	}
}

// TestScope: a namespace of its own always captures; the host's initial
// one, or one the check cannot place, only with the setting, and the
// reason says where serve runs, why that is off and how to turn it on.
func TestScope(t *testing.T) {
	for _, c := range []struct {
		where   Netns
		allowed bool
		capture bool
		says    []string
	}{
		{NetnsOwn, false, true, nil},
		{NetnsOwn, true, true, nil},
		{NetnsInitial, false, false, []string{"host's initial network namespace (basis)", "every process's on the host", "--pcap-host-netns", "APTL_CAPTURE_PCAP_HOST_NETNS=1"}},
		{NetnsInitial, true, true, nil},
		{NetnsUnknown, false, false, []string{"cannot tell", "(basis)", "--pcap-host-netns"}},
		{NetnsUnknown, true, true, nil},
	} {
		capture, reason := Scope(NetnsFinding{c.where, "basis"}, c.allowed)
		if capture != c.capture || capture != (reason == "") {
			t.Errorf("%d, allowed %v: capture %v, reason %q; want capture %v", c.where, c.allowed, capture, reason, c.capture)
		}
		for _, s := range c.says {
			if !strings.Contains(reason, s) {
				t.Errorf("%d, allowed %v: reason %q does not say %q", c.where, c.allowed, reason, s)
			}
		}
	}
}

// netnsChildEnv makes TestCheckNetnsChild report instead of skipping.
const netnsChildEnv = "APTL_CAPTURE_TEST_NETNS_CHILD"

// TestCheckNetnsChild prints CheckNetns's finding, for
// TestCheckNetnsWhereItRuns, which runs it in a namespace of its own.
func TestCheckNetnsChild(t *testing.T) {
	if os.Getenv(netnsChildEnv) != "1" {
		t.Skip("run by TestCheckNetnsWhereItRuns")
	}
	f := CheckNetns()
	fmt.Printf("netns=%d basis=%s\n", f.Netns, f.Basis)
	fmt.Printf("before 6.18: netns=%d basis=%s\n", beforeFixedIno().Netns, beforeFixedIno().Basis)
}

// beforeFixedIno is the check as on a kernel before 6.18, on this one's
// namespaces: the fallback, on real files.
func beforeFixedIno() NetnsFinding {
	f := readNsFacts()
	f.kernel = [2]int{5, 15}
	return classifyNetns(f)
}

// TestCheckNetnsWhereItRuns: the real check, in a fresh network namespace
// (capture on, by default), and in the test's own when that is the
// host's initial one (off by default, on with the setting). Whether it
// is comes from the test's own oracle: on the initial PID namespace, the
// network namespace of kthreadd, a kernel thread.
func TestCheckNetnsWhereItRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a fresh network namespace needs root (CLONE_NEWNET)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCheckNetnsChild$", "-test.v")
	cmd.Env = append(os.Environ(), netnsChildEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the check in a fresh namespace: %v\n%s", err, out)
	}
	for _, want := range []string{fmt.Sprintf("\nnetns=%d ", NetnsOwn), fmt.Sprintf("before 6.18: netns=%d ", NetnsOwn)} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("in a fresh network namespace the check says\n%s\nwant %q: a namespace of its own", out, want)
		}
	}
	t.Logf("fresh namespace:\n%s", out)

	RequireHostNetns(t)
	f := CheckNetns()
	if f.Netns != NetnsInitial {
		t.Fatalf("in the host's initial network namespace the check says %d (%s)", f.Netns, f.Basis)
	}
	if capture, reason := Scope(f, false); capture || reason == "" {
		t.Errorf("the initial namespace captures by default")
	}
	if capture, _ := Scope(f, true); !capture {
		t.Errorf("the initial namespace does not capture with the setting")
	}
	if old := beforeFixedIno(); old.Netns != NetnsInitial {
		t.Errorf("as before 6.18, in the host's initial network namespace the check says %d (%s)", old.Netns, old.Basis)
	}
	t.Logf("initial namespace: %s", f.Basis)
}

// RequireHostNetns skips unless the test runs in the host's initial
// network namespace, by the tests' own oracle: in the initial PID
// namespace, the network namespace of kthreadd, a kernel thread (kernel
// threads never leave the initial one).
func RequireHostNetns(t *testing.T) {
	t.Helper()
	self, err1 := statNs("/proc/self/ns/net")
	pid, err2 := statNs("/proc/self/ns/pid")
	comm, _ := os.ReadFile("/proc/2/comm")
	kthreadd, err3 := statNs("/proc/2/ns/net")
	if err1 != nil || err2 != nil || err3 != nil || pid.ino != initPIDNsIno || string(comm) != "kthreadd\n" {
		t.Skipf("the test cannot tell whether it runs in the host's initial network namespace (%v %v %v, PID namespace %#x)", err1, err2, err3, pid.ino)
	}
	if self != kthreadd {
		t.Skip("the test runs in a network namespace of its own, not the host's initial one")
	}
}
