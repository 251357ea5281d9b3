package pcap

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Where the engine may capture. It sees every packet of the network
// namespace serve runs in. In a namespace of the lab's (the Compose
// deployment's, which the sidecar shares with the workload; one made
// with ip netns) those are the lab's packets. In the host's initial
// namespace they are every process's on the host: a developer's other
// connections, which are no session's and may be private. So serve
// captures there only when told to (Scope's hostAllowed).

// Netns is where serve's network namespace is.
type Netns int

const (
	// NetnsOwn is a network namespace of its own: a lab's, a container's.
	NetnsOwn Netns = iota
	// NetnsInitial is the host's initial network namespace.
	NetnsInitial
	// NetnsUnknown: the check could not tell.
	NetnsUnknown
)

// NetnsFinding is where the process's network namespace is, and what the
// finding rests on (for the log and a session's pcap_reason).
type NetnsFinding struct {
	Netns Netns
	Basis string
}

// The inode numbers the kernel gives the initial namespaces
// (include/uapi/linux/nsfs.h): the PID namespace's since Linux 3.8, the
// network namespace's since 6.18. Namespaces made later are numbered from
// 0xF0000000 up, so no other namespace has them.
const (
	initPIDNsIno = 0xEFFFFFFC
	initNetNsIno = 0xEFFFFFF9
)

// fixedNetInoKernel is the first kernel that numbers the initial network
// namespace initNetNsIno.
var fixedNetInoKernel = [2]int{6, 18}

// nsFile identifies a namespace: its nsfs file's device and inode.
type nsFile struct{ dev, ino uint64 }

// nsFacts are what the check reads.
type nsFacts struct {
	kernel   [2]int // major, minor of the running kernel; 0, 0 when unknown
	net, pid nsFile // /proc/self/ns/net, /proc/self/ns/pid
	selfErr  error  // reading them
	// hostNet is the network namespace of a process that is in the
	// initial one when the PID namespace is the initial one: the kernel's
	// thread kthreadd (pid 2; kernel threads never leave it), or else init
	// (pid 1); hostWho names which.
	hostNet nsFile
	hostWho string
	hostErr error
}

// CheckNetns says whether serve runs in the host's initial network
// namespace. It rests on, in order:
//   - the inode of /proc/self/ns/net: the initial namespace's is fixed on
//     Linux 6.18 and later, so there it answers both ways, in a container
//     too;
//   - on earlier kernels, in the initial PID namespace (whose inode is
//     fixed since 3.8), pid 2 is the kernel's kthreadd, whose network
//     namespace is the initial one (kernel threads never leave it), and
//     pid 1 the host's init: serve is in the initial namespace when
//     theirs (kthreadd's, else init's) is /proc/self/ns/net's (device and
//     inode); unknown when neither can be read;
//   - on earlier kernels, in a PID namespace of its own (a container, the
//     Compose deployment), the host's processes cannot be seen: the
//     container's network is taken to be its own (Compose's is the
//     lab's). A container started with the host's network (network_mode:
//     host) on such a kernel is not recognised; leave pcap out of
//     --classes there.
func CheckNetns() NetnsFinding { return classifyNetns(readNsFacts()) }

func readNsFacts() nsFacts {
	var f nsFacts
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		f.kernel = kernelVersion(unix.ByteSliceToString(uts.Release[:]))
	}
	f.net, f.selfErr = statNs("/proc/self/ns/net")
	if f.selfErr == nil {
		f.pid, f.selfErr = statNs("/proc/self/ns/pid")
	}
	if comm, err := os.ReadFile("/proc/2/comm"); err == nil && string(comm) == "kthreadd\n" {
		if f.hostNet, f.hostErr = statNs("/proc/2/ns/net"); f.hostErr == nil {
			f.hostWho = "kthreadd's (pid 2)"
			return f
		}
	}
	f.hostNet, f.hostErr = statNs("/proc/1/ns/net")
	f.hostWho = "init's (pid 1)"
	return f
}

func statNs(path string) (nsFile, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsFile{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return nsFile{dev: uint64(st.Dev), ino: st.Ino}, nil
}

// kernelVersion is the major and minor number of a kernel release
// ("6.18.44-fc"); 0, 0 when it does not begin with them.
func kernelVersion(release string) [2]int {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return [2]int{}
	}
	major, err1 := strconv.Atoi(parts[0])
	digits := parts[1]
	if i := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		digits = digits[:i] // "19-rc1"
	}
	minor, err2 := strconv.Atoi(digits)
	if err1 != nil || err2 != nil {
		return [2]int{}
	}
	return [2]int{major, minor}
}

func atLeast(v, w [2]int) bool { return v[0] > w[0] || v[0] == w[0] && v[1] >= w[1] }

// classifyNetns is CheckNetns's decision (its comment says what it
// rests on).
func classifyNetns(f nsFacts) NetnsFinding {
	switch {
	case f.selfErr != nil:
		return NetnsFinding{NetnsUnknown, "its namespaces cannot be read: " + f.selfErr.Error()}
	case f.net.ino == initNetNsIno:
		return NetnsFinding{NetnsInitial, "its network namespace has the initial namespace's inode number"}
	case atLeast(f.kernel, fixedNetInoKernel):
		return NetnsFinding{NetnsOwn, "its network namespace's inode number is not the initial namespace's"}
	case f.pid.ino != initPIDNsIno:
		return NetnsFinding{NetnsOwn, "it runs in a PID namespace of its own (a container), whose network is taken to be its own"}
	case f.hostErr != nil:
		return NetnsFinding{NetnsUnknown, "the network namespace of the host's first processes cannot be read: " + f.hostErr.Error()}
	case f.hostNet == f.net:
		return NetnsFinding{NetnsInitial, "its network namespace is " + f.hostWho}
	}
	return NetnsFinding{NetnsOwn, "its network namespace is not " + f.hostWho}
}

// Scope decides whether the engine captures where serve runs: always in
// a network namespace of its own; in the host's initial one, or where
// that cannot be told, only when hostAllowed. When it does not, reason
// says why, for the log, readiness and each session's open record.
func Scope(f NetnsFinding, hostAllowed bool) (capture bool, reason string) {
	if f.Netns == NetnsOwn || hostAllowed {
		return true, ""
	}
	const how = "; --pcap-host-netns (APTL_CAPTURE_PCAP_HOST_NETNS=1) captures anyway"
	if f.Netns == NetnsInitial {
		return false, "serve runs in the host's initial network namespace (" + f.Basis + "), whose packets are every process's on the host, not a session's" + how
	}
	return false, "serve cannot tell whether it runs in the host's initial network namespace (" + f.Basis + ")" + how
}
