package audit

// The syscall names a rule may give with -S, per architecture: the ones the
// lab's rules use (process start and end, network, file writes) and their
// close relatives. A name missing here is refused with the rule's line, so
// a rules file never loads with a syscall silently left out. Numbers are
// the kernel's (arch/x86/entry/syscalls/syscall_64.tbl and syscall_32.tbl).

// Audit architectures (include/uapi/linux/audit.h, AUDIT_ARCH_*).
const (
	archX8664 = 0xc000003e
	archI386  = 0x40000003
)

var syscallsX8664 = map[string]int{
	"read": 0, "write": 1, "open": 2, "close": 3, "pwrite64": 18, "writev": 20,
	"socket": 41, "connect": 42, "accept": 43, "sendto": 44, "sendmsg": 46, "bind": 49, "listen": 50,
	"execve": 59, "exit": 60, "kill": 62, "truncate": 76, "ftruncate": 77,
	"rename": 82, "mkdir": 83, "rmdir": 84, "creat": 85, "link": 86, "unlink": 87, "symlink": 88,
	"chmod": 90, "fchmod": 91, "chown": 92, "ptrace": 101, "setuid": 105, "setgid": 106,
	"mount": 165, "umount2": 166, "init_module": 175, "delete_module": 176,
	"exit_group": 231, "openat": 257, "mkdirat": 258, "fchownat": 260, "unlinkat": 263,
	"renameat": 264, "linkat": 265, "symlinkat": 266, "fchmodat": 268, "accept4": 288,
	"finit_module": 313, "renameat2": 316, "execveat": 322, "openat2": 437,
}

var syscallsI386 = map[string]int{
	"exit": 1, "read": 3, "write": 4, "open": 5, "close": 6, "creat": 8, "link": 9, "unlink": 10,
	"execve": 11, "chmod": 15, "mount": 21, "setuid": 23, "ptrace": 26, "kill": 37,
	"rename": 38, "mkdir": 39, "rmdir": 40, "umount2": 52, "symlink": 83, "truncate": 92,
	"ftruncate": 93, "fchmod": 94, "socketcall": 102, "init_module": 128, "delete_module": 129,
	"writev": 146, "pwrite64": 181, "chown": 182, "exit_group": 252, "openat": 295,
	"mkdirat": 296, "fchownat": 298, "unlinkat": 301, "renameat": 302, "linkat": 303,
	"symlinkat": 304, "fchmodat": 306, "finit_module": 350, "renameat2": 353, "execveat": 358,
	"socket": 359, "bind": 361, "connect": 362, "listen": 363, "accept4": 364,
	"sendto": 369, "sendmsg": 370, "openat2": 437,
}

// archSyscalls returns the syscall table of an audit architecture.
func archSyscalls(arch uint32) map[string]int {
	if arch == archI386 {
		return syscallsI386
	}
	return syscallsX8664
}

// uringOps are the io_uring operations an io_uring rule may name with -S,
// by liburing's names without IORING_OP_ (auditctl's too), numbered as
// enum io_uring_op (include/uapi/linux/io_uring.h): those that reach
// files, the network, processes' credentials and other rings.
var uringOps = map[string]int{
	"nop": 0, "readv": 1, "writev": 2, "fsync": 3, "read_fixed": 4, "write_fixed": 5,
	"sendmsg": 9, "recvmsg": 10, "accept": 13, "connect": 16, "fallocate": 17,
	"openat": 18, "close": 19, "statx": 21, "read": 22, "write": 23, "send": 26,
	"recv": 27, "openat2": 28, "splice": 30, "tee": 33, "shutdown": 34, "renameat": 35,
	"unlinkat": 36, "mkdirat": 37, "symlinkat": 38, "linkat": 39, "msg_ring": 40,
	"fsetxattr": 41, "setxattr": 42, "socket": 45, "uring_cmd": 46, "send_zc": 47,
	"sendmsg_zc": 48, "waitid": 50, "ftruncate": 55, "bind": 56, "listen": 57,
}
