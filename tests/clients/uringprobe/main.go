// Command uringprobe opens a file and connects a TCP socket through
// io_uring (IORING_OP_OPENAT, IORING_OP_CONNECT), never through open(2) or
// connect(2), and prints one line for each step:
//
//	setup=ok|<error>      io_uring_setup (refused by a seccomp profile without io_uring)
//	openat=<result>       the OPENAT completion: fd=N, or the errno
//	connect=<result>      the CONNECT completion: ok, or the errno
//
// It is for the audit witness's live tests: syscall-exit rules never see
// these operations, io_uring rules do (witness/audit/rules.go).
//
//	uringprobe PATH HOST:PORT
package main

import (
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The io_uring ABI (include/uapi/linux/io_uring.h), the parts used here.
const (
	opOpenat  = 18
	opConnect = 16

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	enterGetEvents = 1
	sqeSize        = 64
	cqeSize        = 16
)

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

type ring struct {
	fd             int
	p              params
	sq, cq, sqes   []byte
	sqTail, sqMask *uint32
	sqArray        unsafe.Pointer
	cqHead, cqTail *uint32
	cqMask         *uint32
}

func setup() (*ring, error) {
	r := &ring{}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&r.p)), 0)
	if errno != 0 {
		return nil, errno
	}
	r.fd = int(fd)
	var err error
	if r.sq, err = unix.Mmap(r.fd, offSQRing, int(r.p.sqOff.array+r.p.sqEntries*4), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, fmt.Errorf("mmap sq: %w", err)
	}
	if r.cq, err = unix.Mmap(r.fd, offCQRing, int(r.p.cqOff.cqes+r.p.cqEntries*cqeSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, fmt.Errorf("mmap cq: %w", err)
	}
	if r.sqes, err = unix.Mmap(r.fd, offSQEs, int(r.p.sqEntries*sqeSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, fmt.Errorf("mmap sqes: %w", err)
	}
	r.sqTail = (*uint32)(unsafe.Pointer(&r.sq[r.p.sqOff.tail]))
	r.sqMask = (*uint32)(unsafe.Pointer(&r.sq[r.p.sqOff.ringMask]))
	r.sqArray = unsafe.Pointer(&r.sq[r.p.sqOff.array])
	r.cqHead = (*uint32)(unsafe.Pointer(&r.cq[r.p.cqOff.head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&r.cq[r.p.cqOff.tail]))
	r.cqMask = (*uint32)(unsafe.Pointer(&r.cq[r.p.cqOff.ringMask]))
	return r, nil
}

// do submits one SQE (fill writes its fields) and waits for its completion's result.
func (r *ring) do(fill func(sqe []byte)) (int32, error) {
	tail := atomic.LoadUint32(r.sqTail)
	idx := tail & *r.sqMask
	sqe := r.sqes[idx*sqeSize : (idx+1)*sqeSize]
	clear(sqe)
	fill(sqe)
	*(*uint32)(unsafe.Add(r.sqArray, 4*idx)) = idx
	atomic.StoreUint32(r.sqTail, tail+1)
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 1, 1, enterGetEvents, 0, 0); errno != 0 {
		return 0, errno
	}
	head := atomic.LoadUint32(r.cqHead)
	if head == atomic.LoadUint32(r.cqTail) {
		return 0, fmt.Errorf("no completion")
	}
	off := r.p.cqOff.cqes + (head&*r.cqMask)*cqeSize
	res := *(*int32)(unsafe.Pointer(&r.cq[off+8]))
	atomic.StoreUint32(r.cqHead, head+1)
	return res, nil
}

func put64(b []byte, off int, v uint64) { *(*uint64)(unsafe.Pointer(&b[off])) = v }
func put32(b []byte, off int, v uint32) { *(*uint32)(unsafe.Pointer(&b[off])) = v }

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: uringprobe PATH HOST:PORT")
		os.Exit(2)
	}
	ap, err := netip.ParseAddrPort(os.Args[2])
	if err != nil || !ap.Addr().Is4() {
		fmt.Fprintln(os.Stderr, "uringprobe: HOST:PORT must be an IPv4 address and port")
		os.Exit(2)
	}
	r, err := setup()
	if err != nil {
		fmt.Println("setup=" + err.Error())
		return
	}
	fmt.Println("setup=ok")
	path := append([]byte(os.Args[1]), 0)
	res, err := r.do(func(sqe []byte) {
		sqe[0] = opOpenat
		*(*int32)(unsafe.Pointer(&sqe[4])) = unix.AT_FDCWD
		put64(sqe, 16, uint64(uintptr(unsafe.Pointer(&path[0]))))
		put32(sqe, 28, unix.O_RDONLY|unix.O_CLOEXEC)
	})
	fmt.Println("openat=" + result(res, err, "fd=%d"))
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fmt.Println("connect=socket: " + err.Error())
		return
	}
	// struct sockaddr_in: family (host order), port and address (network order).
	sa := make([]byte, 16)
	*(*uint16)(unsafe.Pointer(&sa[0])) = unix.AF_INET
	sa[2], sa[3] = byte(ap.Port()>>8), byte(ap.Port())
	a4 := ap.Addr().As4()
	copy(sa[4:8], a4[:])
	res, err = r.do(func(sqe []byte) {
		sqe[0] = opConnect
		put32(sqe, 4, uint32(sock))
		put64(sqe, 8, uint64(len(sa))) // addr2: the address's length
		put64(sqe, 16, uint64(uintptr(unsafe.Pointer(&sa[0]))))
	})
	fmt.Println("connect=" + result(res, err, "ok"))
}

// result words a completion: format (with the result) when it succeeded,
// the errno when the kernel refused the operation.
func result(res int32, err error, format string) string {
	switch {
	case err != nil:
		return err.Error()
	case res < 0:
		return unix.Errno(-res).Error()
	case format == "ok":
		return "ok"
	}
	return fmt.Sprintf(format, res)
}
