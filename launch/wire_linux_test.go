package launch

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// seqpacketPair returns both ends of a SOCK_SEQPACKET socketpair as UnixConns.
func seqpacketPair(t *testing.T) (a, b *net.UnixConn) {
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

// rawFrame builds a frame by hand, so tests can lie in any field.
func rawFrame(version uint16, typ msgType, nfds uint8, declaredLen int, body []byte) []byte {
	b := make([]byte, frameHeaderLen, frameHeaderLen+len(body))
	binary.BigEndian.PutUint16(b[0:2], version)
	b[2] = byte(typ)
	b[3] = nfds
	binary.BigEndian.PutUint32(b[4:8], uint32(declaredLen))
	return append(b, body...)
}

func goodFrame(typ msgType, body []byte, nfds uint8) []byte {
	return rawFrame(wireVersion, typ, nfds, len(body), body)
}

// sendRaw writes data with fds attached (the fds stay open in this process).
func sendRaw(c *net.UnixConn, data []byte, files ...*os.File) error {
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.WriteMsgUnix(data, oob, nil)
	runtime.KeepAlive(files)
	return err
}

func devNull(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// leakCheck records fds and goroutines now and, at cleanup, waits until both
// are back to where they were. The garbage collector is off meanwhile: an
// unreachable *os.File's finalizer would close a leaked fd and hide the leak.
func leakCheck(t *testing.T) {
	t.Helper()
	runtime.GC()
	gcPercent := debug.SetGCPercent(-1)
	baseFD, baseG := openFDs(t), runtime.NumGoroutine()
	t.Cleanup(func() {
		defer debug.SetGCPercent(gcPercent)
		deadline := time.Now().Add(failAfter)
		for openFDs(t) > baseFD || runtime.NumGoroutine() > baseG {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Fatalf("leak: %d fds (was %d): %s; %d goroutines (was %d):\n%s", openFDs(t), baseFD, listFDs(),
					runtime.NumGoroutine(), baseG, buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

var okStarted = func() []byte {
	return startedMsg{user: "tester", uid: 1000, gid: 1000, home: "/home/tester", shell: "/bin/sh", note: "fake"}.encode()
}()

// TestAgentAdapterRobustness runs the sidecar's side against a fake agent
// that misbehaves in one way per case. Each case must end with a clear
// error and no leaked fds (the spec's fds, the connection, any fd the fake
// agent sent) or goroutines.
func TestAgentAdapterRobustness(t *testing.T) {
	for _, tt := range []struct {
		name string
		// agent runs as the fake agent after it read (and closed) the spawn request.
		agent   func(t *testing.T, c *net.UnixConn)
		wantErr string
	}{
		{"oversized reply", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgStarted, make([]byte, maxReplyFrame), 0))
		}, "frame larger than"},
		{"truncated header", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, []byte{0, 1, byte(msgStarted)})
		}, "truncated frame: 3 bytes"},
		{"truncated body", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, rawFrame(wireVersion, msgStarted, 0, len(okStarted)+10, okStarted))
		}, "truncated started frame"},
		{"body ends inside a field", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgStarted, okStarted[:len(okStarted)-2], 0))
		}, "body ends inside a field"},
		{"trailing bytes", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgStarted, append(append([]byte{}, okStarted...), 0), 0))
		}, "after the last field"},
		{"wrong version", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, rawFrame(wireVersion+1, msgStarted, 0, len(okStarted), okStarted))
		}, "frame version 2"},
		{"unknown op", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(99, nil, 0))
		}, "unexpected unknown(99) frame"},
		{"request type as reply", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, nil, 0))
		}, "unexpected spawn frame"},
		{"fd sent back", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgStarted, okStarted, 1), devNull(t))
		}, "agent sent 1 fds with a started frame; closed them"},
		{"undeclared fd", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgStarted, okStarted, 0), devNull(t))
		}, "declares 0 fds, 1 arrived"},
		{"many fds", func(t *testing.T, c *net.UnixConn) {
			n := devNull(t)
			sendRaw(c, goodFrame(msgStarted, okStarted, 8), n, n, n, n, n, n, n, n)
		}, "more than 3 fds"},
		{"declared fd missing", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgStarted, okStarted, 1))
		}, "declares 1 fds, 0 arrived"},
		{"another user", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgStarted, startedMsg{user: "root", shell: "/bin/sh"}.encode(), 0))
		}, "another user"},
		{"error reply", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgError, errorMsg{code: errCodeNotAllowed, message: "no"}.encode(), 0))
		}, "refused the request: user-not-allowed"},
		{"closes at once", func(t *testing.T, c *net.UnixConn) {}, "peer closed the connection"},
		{"silent", func(t *testing.T, c *net.UnixConn) {
			time.Sleep(300 * time.Millisecond) // past the 100ms reply timeout: the condition under test
		}, "no answer within 100ms"},
		{"slow", func(t *testing.T, c *net.UnixConn) {
			time.Sleep(300 * time.Millisecond)
			sendRaw(c, goodFrame(msgStarted, okStarted, 0))
		}, "no answer within 100ms"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			leakCheck(t)
			err := launchAgainstFake(t, tt.agent)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Launch = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// launchAgainstFake launches a pipes spec through an Agent whose connection
// is a socketpair with fake on the other end. It waits for fake to finish,
// ends any process Launch returned, and returns Launch's error.
func launchAgainstFake(t *testing.T, fake func(*testing.T, *net.UnixConn)) error {
	t.Helper()
	p, err, fakeDone := startAgainstFake(t, fake)
	<-fakeDone
	if err == nil {
		p.Hangup()
		p.Wait()
	}
	return err
}

// startAgainstFake is launchAgainstFake without the waiting: fake runs on
// (fakeDone is closed when it returns) while the caller uses the process.
func startAgainstFake(t *testing.T, fake func(*testing.T, *net.UnixConn)) (Process, error, <-chan struct{}) {
	t.Helper()
	sidecar, agentEnd := seqpacketPair(t)
	a := &Agent{socket: "@fake", dialTimeout: time.Second, replyTimeout: 100 * time.Millisecond, exitWait: 200 * time.Millisecond,
		dial: func(context.Context) (*net.UnixConn, error) { return sidecar, nil }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer agentEnd.Close()
		f, err := readFrame(agentEnd, maxRequestFrame, msgSpawn)
		f.closeFiles()
		if err != nil {
			t.Errorf("fake agent: %v", err)
			return
		}
		fake(t, agentEnd)
	}()
	spec, stdin, stdout, stderr := pipeSpec(t, "tester", "true")
	p, err := a.Launch(context.Background(), spec)
	stdin.Close()
	stdout.Close()
	stderr.Close()
	if err != nil {
		sidecar.Close() // Launch closed it; a no-op that keeps the leak check honest
	}
	return p, err, done
}

// TestAgentProcessRobustness covers the session after "started": what the
// fake agent does instead of reporting a clean exit, and what Wait says.
func TestAgentProcessRobustness(t *testing.T) {
	for _, tt := range []struct {
		name    string
		hangup  bool // the sidecar hangs up first
		agent   func(t *testing.T, c *net.UnixConn)
		wantErr string // "" means a clean exit
	}{
		{"exit", false, func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgExit, exitMsg{code: 7}.encode(), 0))
		}, ""},
		{"vanishes", false, func(t *testing.T, c *net.UnixConn) {}, "closed the connection without an exit status"},
		{"fd with the exit", false, func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgExit, exitMsg{code: 7}.encode(), 1), devNull(t))
		}, "agent sent 1 fds with a exit frame"},
		{"impossible status", false, func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgExit, exitMsg{code: 300}.encode(), 0))
		}, "not a wait status"},
		{"code and signal", false, func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgExit, exitMsg{code: 1, signal: 9}.encode(), 0))
		}, "not a wait status"},
		{"error", false, func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgError, errorMsg{code: "agent-shutdown", message: "bye"}.encode(), 0))
		}, "agent-shutdown"},
		{"oversized", false, func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgExit, make([]byte, maxReplyFrame), 0))
		}, "frame larger than"},
		{"started twice", false, func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgStarted, okStarted, 0))
		}, "unexpected started frame"},
		{"silent after hang-up", true, func(t *testing.T, c *net.UnixConn) {
			// Reads the hang-up (EOF) and then says nothing: past exitWait.
			readFrame(c, maxRequestFrame, msgSignal)
			time.Sleep(500 * time.Millisecond)
		}, "no exit status within 200ms of the hang-up"},
		{"exit after hang-up", true, func(t *testing.T, c *net.UnixConn) {
			if _, err := readFrame(c, maxRequestFrame, msgSignal); !errors.Is(err, errPeerClosed) {
				t.Errorf("fake agent: hang-up read = %v, want EOF", err)
			}
			sendRaw(c, goodFrame(msgExit, exitMsg{signal: uint32(syscall.SIGHUP)}.encode(), 0))
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			leakCheck(t)
			p, err, fakeDone := startAgainstFake(t, func(t *testing.T, c *net.UnixConn) {
				sendRaw(c, goodFrame(msgStarted, okStarted, 0))
				tt.agent(t, c)
			})
			if err != nil {
				t.Fatalf("Launch: %v", err)
			}
			defer func() { <-fakeDone }()
			if tt.hangup {
				p.Hangup()
			}
			exit, werr := p.Wait()
			switch {
			case tt.wantErr == "" && werr != nil:
				t.Fatalf("Wait: %v", werr)
			case tt.wantErr != "" && (!errors.Is(werr, ErrAgentLost) || !strings.Contains(werr.Error(), tt.wantErr)):
				t.Fatalf("Wait = %+v, %v; want ErrAgentLost containing %q", exit, werr, tt.wantErr)
			}
			if err := p.Signal(syscall.SIGINT); !errors.Is(err, os.ErrProcessDone) {
				t.Errorf("Signal after Wait = %v, want ErrProcessDone", err)
			}
		})
	}
}
