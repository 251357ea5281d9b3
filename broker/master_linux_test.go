package broker

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newRawPTY allocates a pair as sessions do and puts the slave in raw mode,
// so that bytes pass unchanged and nothing is echoed back to the master.
func newRawPTY(t *testing.T) (*ptyMaster, *os.File) {
	t.Helper()
	master, slave, err := allocatePTY()
	if err != nil {
		t.Fatalf("allocatePTY: %v", err)
	}
	t.Cleanup(func() { master.Close(); slave.Close() })
	// Through the RawConn, not Fd(), which would make the slave blocking
	// and so take its reads' deadlines away.
	rc, err := slave.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ioctlErr error
	err = rc.Control(func(fd uintptr) {
		tio, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
		if err != nil {
			ioctlErr = err
			return
		}
		tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		tio.Oflag &^= unix.OPOST
		tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
		ioctlErr = unix.IoctlSetTermios(int(fd), unix.TCSETS, tio)
	})
	if err != nil || ioctlErr != nil {
		t.Fatalf("raw mode on the slave: %v, %v", err, ioctlErr)
	}
	// Every read of the slave below is bounded: a failure is a failure,
	// not a test that hangs until go test's timeout.
	if err := slave.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatalf("the slave takes no read deadline: %v", err)
	}
	return master, slave
}

// masterFD returns the master's descriptor number (for reading the epoll
// sets of this process, not for I/O).
func masterFD(t *testing.T, m *ptyMaster) int {
	t.Helper()
	fd := -1
	if err := m.fileConn.Control(func(f uintptr) { fd = int(f) }); err != nil {
		t.Fatal(err)
	}
	return fd
}

// outputWatchers lists the epoll sets of this process that watch fd for
// output readiness (EPOLLOUT), by their descriptors, from /proc/self/fdinfo:
// the runtime poller's own set included, which is what the master must stay
// out of.
func outputWatchers(t *testing.T, fd int) []string {
	t.Helper()
	infos, err := filepath.Glob("/proc/self/fdinfo/*")
	if err != nil || len(infos) == 0 {
		t.Skipf("no /proc/self/fdinfo to read epoll sets from (%v)", err)
	}
	var sets []string
	for _, info := range infos {
		text, err := os.ReadFile(info)
		if err != nil {
			continue // a descriptor closed while listing
		}
		for _, line := range strings.Split(string(text), "\n") {
			// "tfd:        9 events:       19 data: ..."
			f := strings.Fields(line)
			if len(f) < 4 || f[0] != "tfd:" || f[1] != strconv.Itoa(fd) || f[2] != "events:" {
				continue
			}
			events, err := strconv.ParseUint(f[3], 16, 32)
			if err != nil {
				t.Fatalf("%s: events %q: %v", info, f[3], err)
			}
			if events&unix.EPOLLOUT != 0 {
				sets = append(sets, filepath.Base(info))
			}
		}
	}
	return sets
}

// waitForWaitingWrite returns once a write on the master (fd) waits for
// room, which is when the master is watched for output readiness; it
// fails if the write ends first (done) or never waits.
func waitForWaitingWrite(t *testing.T, fd int, done <-chan error) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(outputWatchers(t, fd)) == 0; time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("a 1 MiB write into a terminal nobody reads returned (%v) instead of waiting", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the write never waited: the master was not watched for output readiness within 10 s")
		}
	}
}

// The shell's reads of the slave make the master writable, byte after byte
// of a typed line; no epoll set of this process, the runtime poller's
// included, may be watching for that, or each byte wakes a thread.
// Equivalent mutant (gremlins): master_linux.go inputStep's `n > 0` ->
// `>= 0`: write(2) returns -1 or a count, and adding a count of 0 changes
// nothing.
func TestMasterIsWatchedForOutputReadinessOnlyWhileAWriteWaits(t *testing.T) {
	master, slave := newRawPTY(t)
	fd := masterFD(t, master)
	if sets := outputWatchers(t, fd); len(sets) != 0 {
		t.Fatalf("the idle master (fd %d) is watched for output readiness by epoll sets %v", fd, sets)
	}
	// Exercise both directions, then look again.
	if _, err := master.Write([]byte("ls\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	if _, err := io.ReadFull(slave, got); err != nil || string(got) != "ls\n" {
		t.Fatalf("slave read %q, %v", got, err)
	}
	if _, err := slave.Write([]byte("out")); err != nil {
		t.Fatal(err)
	}
	if b, n, _, err := readBatch(master, false); err != nil || string((*b)[:n]) != "out" {
		t.Fatalf("readBatch: %v", err)
	} else {
		putBatch(b)
	}
	if sets := outputWatchers(t, fd); len(sets) != 0 {
		t.Fatalf("after a write and a read, the master (fd %d) is watched for output readiness by epoll sets %v", fd, sets)
	}

	// A write that finds the input queue full waits, watching for output
	// readiness while it waits and no longer once it is done.
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: far past the queue
	written := make(chan error, 1)
	go func() {
		n, err := master.Write(payload)
		if err == nil && n != len(payload) {
			err = errors.New("short write " + strconv.Itoa(n))
		}
		written <- err
	}()
	waitForWaitingWrite(t, fd, written)
	received := make([]byte, len(payload))
	if _, err := io.ReadFull(slave, received); err != nil {
		t.Fatalf("reading the payload from the slave: %v", err)
	}
	if err := <-written; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(received, payload) {
		t.Fatal("the slave received other bytes than the master was given")
	}
	if sets := outputWatchers(t, fd); len(sets) != 0 {
		t.Fatalf("after the waiting write, the master (fd %d) is still watched for output readiness by %v", fd, sets)
	}
}

// Reads end with what was queued, then with the hang-up once no slave is
// open; a read deadline ends a wait; Close ends a waiting read and a
// waiting write, and later calls fail instead of touching the descriptor.
func TestMasterEndsOfReadsAndWrites(t *testing.T) {
	t.Run("hang-up after the queued output", func(t *testing.T) {
		master, slave := newRawPTY(t)
		slave.Write([]byte("last words"))
		slave.Close()
		b, n, waited, err := readBatch(master, false)
		if err != nil || string((*b)[:n]) != "last words" || waited {
			t.Fatalf("first read: n=%d waited=%v err=%v", n, waited, err)
		}
		putBatch(b)
		if _, _, _, err := readBatch(master, false); !errors.Is(err, syscall.EIO) {
			t.Fatalf("read after the slave closed: %v, want EIO", err)
		}
	})
	t.Run("read deadline", func(t *testing.T) {
		master, _ := newRawPTY(t)
		master.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, _, waited, err := readBatch(master, false); !errors.Is(err, os.ErrDeadlineExceeded) || !waited {
			t.Fatalf("read with a deadline on an idle terminal: waited=%v err=%v, want a deadline error after waiting", waited, err)
		}
	})
	t.Run("close", func(t *testing.T) {
		master, _ := newRawPTY(t)
		readDone, writeDone := make(chan error, 1), make(chan error, 1)
		go func() { _, _, _, err := readBatch(master, false); readDone <- err }()
		go func() { _, err := master.Write(make([]byte, 1<<20)); writeDone <- err }()
		waitForWaitingWrite(t, masterFD(t, master), writeDone)
		closed := make(chan error, 1)
		go func() { closed <- master.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close with a read and a write waiting did not return within 10 s")
		}
		for name, done := range map[string]chan error{"read": readDone, "write": writeDone} {
			select {
			case err := <-done:
				if !errors.Is(err, os.ErrClosed) {
					t.Errorf("waiting %s ended with %v, want os.ErrClosed", name, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("a waiting %s did not end within 10 s of Close", name)
			}
		}
		if _, err := master.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
			t.Errorf("write after Close: %v, want os.ErrClosed", err)
		}
		if err := setWindow(master, window{rows: 24, cols: 80}); !errors.Is(err, os.ErrClosed) {
			t.Errorf("resize after Close: %v, want os.ErrClosed", err)
		}
	})
}

// A read that waits on the input set is woken by output the shell writes
// later, and by the hang-up when the last slave closes.
func TestMasterWaitingReadIsWoken(t *testing.T) {
	master, slave := newRawPTY(t)
	type result struct {
		got    string
		waited bool
		err    error
	}
	results := make(chan result, 1)
	read := func() {
		b, n, waited, err := readBatch(master, false)
		r := result{waited: waited, err: err}
		if n > 0 {
			r.got = string((*b)[:n])
			putBatch(b)
		}
		results <- r
	}
	next := func(what string) result {
		t.Helper()
		select {
		case r := <-results:
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("a waiting read was not woken by %s", what)
			return result{}
		}
	}
	go read()
	time.Sleep(50 * time.Millisecond) // let it wait; if it has not yet, it reads without waiting
	if _, err := slave.Write([]byte("out")); err != nil {
		t.Fatal(err)
	}
	if r := next("output"); r.got != "out" || r.err != nil {
		t.Fatalf("read %q, %v", r.got, r.err)
	}
	go read()
	time.Sleep(50 * time.Millisecond)
	slave.Close()
	if r := next("the hang-up"); !errors.Is(r.err, syscall.EIO) {
		t.Fatalf("read after the slave closed: %v, want EIO", r.err)
	}
}

// Once no slave is open, the master's writes fill the slave's queue and
// then fail with EAGAIN (not EIO) while epoll reports EPOLLHUP for good: a
// write waiting then must end with EIO, not retry in a loop.
func TestMasterWaitingWriteEndsAtHangUp(t *testing.T) {
	master, slave := newRawPTY(t)
	written := make(chan error, 1)
	go func() { _, err := master.Write(make([]byte, 1<<20)); written <- err }()
	waitForWaitingWrite(t, masterFD(t, master), written)
	slave.Close()
	select {
	case err := <-written:
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("write after the slave closed: %v, want EIO", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write waiting on a hung-up terminal did not end (it retries in a loop)")
	}
}

// newPTYMaster's failures are errors, with the descriptor closed.
func TestNewPTYMasterFailure(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "regular"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// epoll refuses a regular file (EPERM).
	if m, err := newPTYMaster(fd, "regular"); err == nil || m != nil {
		t.Fatalf("newPTYMaster of a regular file: %v, %v; want an error", m, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("the descriptor is still open after the failure (F_GETFD: %v)", err)
	}
}

// A read callback that panics (copyOutput recovers a session's panics)
// leaves the master usable and holding no reference to the callback, which
// would keep its batch alive for the rest of the session.
func TestMasterReadCallbackPanic(t *testing.T) {
	master, slave := newRawPTY(t)
	if _, err := slave.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	rc, err := master.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { recover() }()
		rc.Read(func(uintptr) bool { panic("callback failed") })
	}()
	if master.read.f != nil {
		t.Error("after a panic in the read callback the master still holds the callback")
	}
	b, n, _, err := readBatch(master, false)
	if err != nil || n != 1 {
		t.Fatalf("read after the panic: %d bytes, %v; want the byte written before it", n, err)
	}
	putBatch(b)
}
