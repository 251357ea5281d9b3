package launch

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// serveFake serves one connection of srv on a socketpair and returns the
// sidecar's end; done is closed when the server is finished with it.
func serveFake(t *testing.T, srv *AgentServer) (c *net.UnixConn, done <-chan struct{}) {
	t.Helper()
	sidecar, agentEnd := seqpacketPair(t)
	if !srv.track() {
		t.Fatal("server closing")
	}
	cred, err := peerCred(agentEnd)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		srv.serveConn(agentEnd, 1, cred)
	}()
	t.Cleanup(func() { sidecar.Close(); <-ch })
	return sidecar, ch
}

// readReply reads one reply of a type in want, bounded.
func readReply(t *testing.T, c *net.UnixConn, want ...msgType) frame {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(failAfter))
	f, err := readFrame(c, maxReplyFrame, want...)
	if err != nil {
		t.Fatalf("reading %v: %v", want, err)
	}
	if len(f.files) != 0 {
		f.closeFiles()
		t.Fatal("the agent sent fds")
	}
	return f
}

// wantErrorReply reads an error reply and checks its code and message.
func wantErrorReply(t *testing.T, c *net.UnixConn, code, msg string) {
	t.Helper()
	m, err := decodeError(readReply(t, c, msgError).body)
	if err != nil {
		t.Fatal(err)
	}
	if m.code != code || !strings.Contains(m.message, msg) {
		t.Fatalf("error reply %s %q, want %s containing %q", m.code, m.message, code, msg)
	}
}

// childPipes returns the child's ends of three pipes (stdin read end, stdout
// and stderr write ends) and the test's ends; all close at cleanup.
func childPipes(t *testing.T) (child, ours []*os.File) {
	t.Helper()
	for i := 0; i < 3; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		if i == 0 {
			child, ours = append(child, r), append(ours, w)
		} else {
			child, ours = append(child, w), append(ours, r)
		}
	}
	return child, ours
}

func spawnBody(mode uint32, user, term string, env ...string) []byte {
	return spawnMsg{mode: mode, user: user, term: term, command: "true", env: env}.encode()
}

// TestAgentServerRobustness sends the agent's server one bad request per
// case from a fake sidecar: each gets an error reply naming the rule it
// broke, every fd sent is closed by the agent, and nothing runs.
func TestAgentServerRobustness(t *testing.T) {
	ta := newTestAgent(t, nil)
	ta.srv.requestTimeout = 100 * time.Millisecond
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("no PTY: %v", err)
	}
	defer master.Close()
	defer slave.Close()
	pipes := func(t *testing.T) []*os.File { c, _ := childPipes(t); return c }
	for _, tt := range []struct {
		name     string
		send     func(t *testing.T, c *net.UnixConn)
		code     string
		contains string
	}{
		{"oversized", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, make([]byte, maxRequestFrame), 0))
		}, errCodeProtocol, "frame larger than"},
		{"truncated header", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, []byte{0, 1, 1, 0, 0})
		}, errCodeProtocol, "truncated frame: 5 bytes"},
		{"truncated body", func(t *testing.T, c *net.UnixConn) {
			b := spawnBody(spawnPTY, "tester", "xterm")
			sendRaw(c, rawFrame(wireVersion, msgSpawn, 1, len(b)+1, b), slave)
		}, errCodeProtocol, "truncated spawn frame"},
		{"wrong version", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, rawFrame(7, msgSpawn, 0, 0, nil))
		}, errCodeProtocol, "frame version 7"},
		{"unknown op", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(99, nil, 0))
		}, errCodeProtocol, "unexpected unknown(99) frame"},
		{"signal before spawn", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSignal, encodeSignal("INT"), 0))
		}, errCodeProtocol, "unexpected signal frame"},
		{"missing fd", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPTY, "tester", "xterm"), 0))
		}, errCodeProtocol, "carries 0 fds, want 1"},
		{"declared fd missing", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPTY, "tester", "xterm"), 1))
		}, errCodeProtocol, "declares 1 fds, 0 arrived"},
		{"extra fd", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPTY, "tester", "xterm"), 2), slave, slave)
		}, errCodeProtocol, "carries 2 fds, want 1"},
		{"too many fds", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPTY, "tester", "xterm"), 6), slave, slave, slave, slave, slave, slave)
		}, errCodeProtocol, "more than 3 fds"},
		{"not a terminal", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPTY, "tester", "xterm"), 1), devNull(t))
		}, errCodeProtocol, "not a terminal"},
		{"master instead of slave", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPTY, "tester", "xterm"), 1), master)
		}, errCodeProtocol, "is a master"},
		{"pipes: not pipes", func(t *testing.T, c *net.UnixConn) {
			n := devNull(t)
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPipes, "tester", ""), 3), n, n, n)
		}, errCodeProtocol, "not a pipe"},
		{"pipes: wrong direction", func(t *testing.T, c *net.UnixConn) {
			p := pipes(t)
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPipes, "tester", ""), 3), p[1], p[1], p[2])
		}, errCodeProtocol, "wrong access mode"},
		{"unknown mode", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(9, "tester", ""), 1), slave)
		}, errCodeProtocol, "unknown mode 9"},
		{"bad user name", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPTY, "../etc", "xterm"), 1), slave)
		}, errCodeProtocol, "not a valid login name"},
		{"user not allowed", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPTY, "daemon", "xterm"), 1), slave)
		}, errCodeNotAllowed, "allow-list"},
		{"bad env", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPTY, "tester", "xterm", "NOEQUALS"), 1), slave)
		}, errCodeProtocol, "env entry 0 is not KEY=VALUE"},
		{"term with escape", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPTY, "tester", "xterm\x1b"), 1), slave)
		}, errCodeProtocol, "term has a byte"},
		{"probe with fd", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgProbe, nil, 1), slave)
		}, errCodeProtocol, "probe frame with a body or fds"},
		{"silent", func(t *testing.T, c *net.UnixConn) {}, errCodeProtocol, "i/o timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			leakCheck(t)
			c, done := serveFake(t, ta.srv)
			tt.send(t, c)
			wantErrorReply(t, c, tt.code, tt.contains)
			c.Close()
			<-done
		})
	}
	if logs := ta.logs.String(); !strings.Contains(logs, `"spawn refused"`) || !strings.Contains(logs, `"request refused"`) {
		t.Errorf("agent log lacks the refusals: %s", logs)
	}
}

// TestAgentServerSessionRobustness covers requests after a session started:
// a bad signal frame is an error reply and a hang-up; the exit still follows.
func TestAgentServerSessionRobustness(t *testing.T) {
	ta := newTestAgent(t, nil)
	for _, tt := range []struct {
		name     string
		send     func(t *testing.T, c *net.UnixConn)
		wantErr  string // error reply before the exit; "" for none
		wantExit Exit
	}{
		{"signal", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSignal, encodeSignal("TERM"), 0))
		}, "", Exit{Signal: syscall.SIGTERM}},
		{"hang-up", func(t *testing.T, c *net.UnixConn) {
			c.CloseWrite()
		}, "", Exit{Signal: syscall.SIGHUP}},
		{"unknown signal name", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSignal, encodeSignal("STOP"), 0))
		}, "signal name is not one of RFC 4254's", Exit{Signal: syscall.SIGHUP}},
		{"signal with fd", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSignal, encodeSignal("TERM"), 1), devNull(t))
		}, "signal frame with fds", Exit{Signal: syscall.SIGHUP}},
		{"second spawn", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSpawn, spawnBody(spawnPTY, "tester", "xterm"), 0))
		}, "unexpected spawn frame", Exit{Signal: syscall.SIGHUP}},
		{"oversized", func(t *testing.T, c *net.UnixConn) {
			sendRaw(c, goodFrame(msgSignal, make([]byte, maxRequestFrame), 0))
		}, "frame larger than", Exit{Signal: syscall.SIGHUP}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			leakCheck(t)
			c, done := serveFake(t, ta.srv)
			child, ours := childPipes(t)
			body := spawnMsg{mode: spawnPipes, user: "tester", command: "echo STARTED; exec sleep 30"}.encode()
			if err := sendRaw(c, goodFrame(msgSpawn, body, 3), child...); err != nil {
				t.Fatal(err)
			}
			for _, f := range child {
				f.Close()
			}
			readReply(t, c, msgStarted)
			buf := make([]byte, 8)
			ours[1].SetReadDeadline(time.Now().Add(failAfter))
			if _, err := ours[1].Read(buf); err != nil {
				t.Fatal(err)
			}
			tt.send(t, c)
			if tt.wantErr != "" {
				wantErrorReply(t, c, errCodeProtocol, tt.wantErr)
			}
			m, err := decodeExit(readReply(t, c, msgExit).body)
			if err != nil {
				t.Fatal(err)
			}
			if got := (Exit{Code: int(m.code), Signal: syscall.Signal(m.signal)}); got != tt.wantExit {
				t.Errorf("exit %+v, want %+v", got, tt.wantExit)
			}
			c.Close()
			<-done
		})
	}
}

// TestReceivedFDsAreCloseOnExec: MSG_CMSG_CLOEXEC, so no fd the agent
// receives leaks into a session process it starts for another connection.
func TestReceivedFDsAreCloseOnExec(t *testing.T) {
	a, b := seqpacketPair(t)
	defer a.Close()
	defer b.Close()
	if err := sendRaw(a, goodFrame(msgProbe, nil, 1), devNull(t)); err != nil {
		t.Fatal(err)
	}
	f, err := readFrame(b, maxRequestFrame, msgProbe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.closeFiles()
	flags, err := unix.FcntlInt(f.files[0].Fd(), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("received fd flags = %#x, %v; want FD_CLOEXEC", flags, err)
	}
}

// TestSpawnRequestSize: the largest request the broker's defaults allow
// fits a frame, and a larger one fails before anything is sent.
func TestSpawnRequestSize(t *testing.T) {
	env := make([]string, 64)
	for i := range env {
		env[i] = "LC_X" + strings.Repeat("v", 1024)
	}
	m := spawnMsg{mode: spawnPTY, user: "kali", term: "xterm", command: strings.Repeat("c", 64<<10), env: env}
	if n := frameHeaderLen + len(m.encode()); n > maxRequestFrame {
		t.Errorf("largest default request is %d bytes, over %d", n, maxRequestFrame)
	}
	a, b := seqpacketPair(t)
	defer a.Close()
	defer b.Close()
	m.env = append(m.env, env...)
	if err := writeFrame(a, maxRequestFrame, time.Time{}, msgSpawn, m.encode()); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("oversized request: %v", err)
	}
	// The limit itself fits in a SOCK_SEQPACKET record with default buffers.
	if err := writeFrame(a, maxRequestFrame, time.Now().Add(failAfter), msgSpawn, make([]byte, maxRequestFrame-frameHeaderLen)); err != nil {
		t.Errorf("a frame of exactly %d bytes: %v", maxRequestFrame, err)
	}
}

// TestAgentRefusesWrongPeerCredentials: a peer whose uid or gid is not the
// sidecar's is closed without a reply, in the development mode too, and
// nothing runs; the agent's log names what it saw and what it expects.
func TestAgentRefusesWrongPeerCredentials(t *testing.T) {
	for name, mutate := range map[string]func(*AgentConfig){
		"uid": func(c *AgentConfig) { c.PeerUID = os.Geteuid() + 1 },
		"gid": func(c *AgentConfig) { c.PeerGID = os.Getegid() + 1 },
	} {
		t.Run(name, func(t *testing.T) {
			ta := newTestAgent(t, mutate)
			spec, stdin, stdout, _ := pipeSpec(t, "tester", "echo SHOULD_NOT_RUN")
			stdin.Close()
			out := readAllAsync(stdout)
			if _, err := ta.agent.Launch(context.Background(), spec); err == nil {
				t.Fatal("Launch succeeded for a peer with the wrong credentials")
			}
			if got := recvString(t, "stdout", out); got != "" {
				t.Errorf("the refused session wrote %q", got)
			}
			logs := ta.logs.String()
			if !strings.Contains(logs, `"connection refused"`) || !strings.Contains(logs, "the agent accepts only the sidecar's uid") ||
				strings.Contains(logs, `"session started"`) {
				t.Errorf("agent log: %s", logs)
			}
		})
	}
}

// TestRefusalLogCounts: past the burst, refusals are counted, not written,
// and the count is reported when the window ends.
func TestRefusalLogCounts(t *testing.T) {
	var logs lockedBuffer
	r := newRefusalLog(slog.New(slog.NewJSONHandler(&logs, nil)))
	r.burst, r.window = 3, time.Hour // the test ends the window with flush
	for i := 0; i < 1000; i++ {
		r.refuse("connection refused", "conn", i)
	}
	r.flush()
	s := logs.String()
	if n := strings.Count(s, `"msg":"connection refused"`); n != 3 {
		t.Errorf("%d refusal lines, want the burst of 3", n)
	}
	if !strings.Contains(s, `"msg":"connection refusals not logged one by one","count":997`) {
		t.Errorf("no count of the other 997: %s", s)
	}
}
