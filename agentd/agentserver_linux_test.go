package agentd

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"github.com/aptl/aptl-kali-capture/internal/peercred"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/launchtest"
)

// serveFake serves one connection of srv on a socketpair and returns the
// sidecar's end; done is closed when the server is finished with it.
func serveFake(t *testing.T, srv *Server) (c *net.UnixConn, done <-chan struct{}) {
	t.Helper()
	sidecar, agentEnd := testutil.SeqpacketPair(t)
	if !srv.track() {
		t.Fatal("server closing")
	}
	cred, err := peercred.Of(agentEnd)
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
func readReply(t *testing.T, c *net.UnixConn, want ...agentwire.Type) agentwire.Frame {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(testutil.FailAfter))
	f, err := agentwire.ReadFrame(c, agentwire.MaxReplyFrame, want...)
	if err != nil {
		t.Fatalf("reading %v: %v", want, err)
	}
	if len(f.Files) != 0 {
		f.CloseFiles()
		t.Fatal("the agent sent fds")
	}
	return f
}

// wantErrorReply reads an error reply and checks its code and message.
func wantErrorReply(t *testing.T, c *net.UnixConn, code, msg string) {
	t.Helper()
	m, err := agentwire.DecodeError(readReply(t, c, agentwire.TypeError).Body)
	if err != nil {
		t.Fatal(err)
	}
	if m.Code != code || !strings.Contains(m.Message, msg) {
		t.Fatalf("error reply %s %q, want %s containing %q", m.Code, m.Message, code, msg)
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
	return agentwire.SpawnMsg{Mode: mode, User: user, Term: term, Command: "true", Env: env}.Encode()
}

// TestServerRobustness sends the agent's server one bad request per
// case from a fake sidecar: each gets an error reply naming the rule it
// broke, every fd sent is closed by the agent, and nothing runs.
func TestServerRobustness(t *testing.T) {
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
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, make([]byte, agentwire.MaxRequestFrame), 0))
		}, agentwire.CodeProtocol, "frame larger than"},
		{"truncated header", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, []byte{0, 1, 1, 0, 0})
		}, agentwire.CodeProtocol, "truncated frame: 5 bytes"},
		{"truncated body", func(t *testing.T, c *net.UnixConn) {
			b := spawnBody(agentwire.SpawnPTY, "tester", "xterm")
			agentwire.SendRecord(c, testutil.RawFrame(agentwire.Version, agentwire.TypeSpawn, 1, len(b)+1, b), slave)
		}, agentwire.CodeProtocol, "truncated spawn frame"},
		{"wrong version", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.RawFrame(7, agentwire.TypeSpawn, 0, 0, nil))
		}, agentwire.CodeProtocol, "frame version 7"},
		{"unknown op", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(99, nil, 0))
		}, agentwire.CodeProtocol, "unexpected unknown(99) frame"},
		{"signal before spawn", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSignal, agentwire.EncodeSignal("INT"), 0))
		}, agentwire.CodeProtocol, "unexpected signal frame"},
		{"missing fd", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "tester", "xterm"), 0))
		}, agentwire.CodeProtocol, "carries 0 fds, want 1"},
		{"declared fd missing", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "tester", "xterm"), 1))
		}, agentwire.CodeProtocol, "declares 1 fds, 0 arrived"},
		{"extra fd", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "tester", "xterm"), 2), slave, slave)
		}, agentwire.CodeProtocol, "carries 2 fds, want 1"},
		{"too many fds", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "tester", "xterm"), 6), slave, slave, slave, slave, slave, slave)
		}, agentwire.CodeProtocol, "more than 3 fds"},
		{"not a terminal", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "tester", "xterm"), 1), testutil.DevNull(t))
		}, agentwire.CodeProtocol, "not a terminal"},
		{"master instead of slave", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "tester", "xterm"), 1), master)
		}, agentwire.CodeProtocol, "is a master"},
		{"pipes: not pipes", func(t *testing.T, c *net.UnixConn) {
			n := testutil.DevNull(t)
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPipes, "tester", ""), 3), n, n, n)
		}, agentwire.CodeProtocol, "not a pipe"},
		{"pipes: wrong direction", func(t *testing.T, c *net.UnixConn) {
			p := pipes(t)
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPipes, "tester", ""), 3), p[1], p[1], p[2])
		}, agentwire.CodeProtocol, "wrong access mode"},
		{"unknown mode", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(9, "tester", ""), 1), slave)
		}, agentwire.CodeProtocol, "unknown mode 9"},
		{"bad user name", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "../etc", "xterm"), 1), slave)
		}, agentwire.CodeProtocol, "not a valid login name"},
		{"user not allowed", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "daemon", "xterm"), 1), slave)
		}, agentwire.CodeNotAllowed, "allow-list"},
		{"bad env", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "tester", "xterm", "NOEQUALS"), 1), slave)
		}, agentwire.CodeProtocol, "env entry 0 is not KEY=VALUE"},
		{"term with escape", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "tester", "xterm\x1b"), 1), slave)
		}, agentwire.CodeProtocol, "term has a byte"},
		// Printable, but not a terminal name: the broker would refuse it
		// (launch.ValidTerm), so the agent does too.
		{"term not a terminal name", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "tester", "xterm;$(id)"), 1), slave)
		}, agentwire.CodeProtocol, "term has a byte"},
		{"term too long", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "tester", strings.Repeat("x", 65)), 1), slave)
		}, agentwire.CodeProtocol, "term has a byte"},
		{"probe with fd", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeProbe, nil, 1), slave)
		}, agentwire.CodeProtocol, "probe frame with a body or fds"},
		{"silent", func(t *testing.T, c *net.UnixConn) {}, agentwire.CodeProtocol, "i/o timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			testutil.LeakCheck(t)
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

// TestServerSessionRobustness covers requests after a session started:
// a bad signal frame is an error reply and a hang-up; the exit still follows.
func TestServerSessionRobustness(t *testing.T) {
	ta := newTestAgent(t, nil)
	for _, tt := range []struct {
		name     string
		send     func(t *testing.T, c *net.UnixConn)
		wantErr  string // error reply before the exit; "" for none
		wantExit launch.Exit
	}{
		{"signal", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSignal, agentwire.EncodeSignal("TERM"), 0))
		}, "", launch.Exit{Signal: syscall.SIGTERM}},
		{"hang-up", func(t *testing.T, c *net.UnixConn) {
			c.CloseWrite()
		}, "", launch.Exit{Signal: syscall.SIGHUP}},
		{"unknown signal name", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSignal, agentwire.EncodeSignal("STOP"), 0))
		}, "signal name is not one of RFC 4254's", launch.Exit{Signal: syscall.SIGHUP}},
		{"signal with fd", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSignal, agentwire.EncodeSignal("TERM"), 1), testutil.DevNull(t))
		}, "signal frame with fds", launch.Exit{Signal: syscall.SIGHUP}},
		{"second spawn", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, spawnBody(agentwire.SpawnPTY, "tester", "xterm"), 0))
		}, "unexpected spawn frame", launch.Exit{Signal: syscall.SIGHUP}},
		{"oversized", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSignal, make([]byte, agentwire.MaxRequestFrame), 0))
		}, "frame larger than", launch.Exit{Signal: syscall.SIGHUP}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			testutil.LeakCheck(t)
			c, done := serveFake(t, ta.srv)
			child, ours := childPipes(t)
			body := agentwire.SpawnMsg{Mode: agentwire.SpawnPipes, User: "tester", Command: "echo STARTED; exec sleep 30"}.Encode()
			if err := agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, body, 3), child...); err != nil {
				t.Fatal(err)
			}
			for _, f := range child {
				f.Close()
			}
			readReply(t, c, agentwire.TypeStarted)
			buf := make([]byte, 8)
			ours[1].SetReadDeadline(time.Now().Add(testutil.FailAfter))
			if _, err := ours[1].Read(buf); err != nil {
				t.Fatal(err)
			}
			tt.send(t, c)
			if tt.wantErr != "" {
				wantErrorReply(t, c, agentwire.CodeProtocol, tt.wantErr)
			}
			m, err := agentwire.DecodeExit(readReply(t, c, agentwire.TypeExit).Body)
			if err != nil {
				t.Fatal(err)
			}
			if got := (launch.Exit{Code: int(m.Code), Signal: syscall.Signal(m.Signal)}); got != tt.wantExit {
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
	a, b := testutil.SeqpacketPair(t)
	defer a.Close()
	defer b.Close()
	if err := agentwire.SendRecord(a, testutil.GoodFrame(agentwire.TypeProbe, nil, 1), testutil.DevNull(t)); err != nil {
		t.Fatal(err)
	}
	f, err := agentwire.ReadFrame(b, agentwire.MaxRequestFrame, agentwire.TypeProbe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.CloseFiles()
	flags, err := unix.FcntlInt(f.Files[0].Fd(), unix.F_GETFD, 0)
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
	m := agentwire.SpawnMsg{Mode: agentwire.SpawnPTY, User: "kali", Term: "xterm", Command: strings.Repeat("c", 64<<10), Env: env}
	if n := agentwire.HeaderLen + len(m.Encode()); n > agentwire.MaxRequestFrame {
		t.Errorf("largest default request is %d bytes, over %d", n, agentwire.MaxRequestFrame)
	}
	a, b := testutil.SeqpacketPair(t)
	defer a.Close()
	defer b.Close()
	m.Env = append(m.Env, env...)
	if err := agentwire.WriteFrame(a, agentwire.MaxRequestFrame, time.Time{}, agentwire.TypeSpawn, m.Encode()); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("oversized request: %v", err)
	}
	// The limit itself fits in a SOCK_SEQPACKET record with default buffers.
	if err := agentwire.WriteFrame(a, agentwire.MaxRequestFrame, time.Now().Add(testutil.FailAfter), agentwire.TypeSpawn, make([]byte, agentwire.MaxRequestFrame-agentwire.HeaderLen)); err != nil {
		t.Errorf("a frame of exactly %d bytes: %v", agentwire.MaxRequestFrame, err)
	}
}

// TestAgentRefusesWrongPeerCredentials: a peer whose uid or gid is not the
// sidecar's is closed without a reply, in the development mode too, and
// nothing runs; the agent's log names what it saw and what it expects.
func TestAgentRefusesWrongPeerCredentials(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"uid": func(c *Config) { c.PeerUID = os.Geteuid() + 1 },
		"gid": func(c *Config) { c.PeerGID = os.Getegid() + 1 },
	} {
		t.Run(name, func(t *testing.T) {
			ta := newTestAgent(t, mutate)
			spec, stdin, stdout, _ := launchtest.PipeSpec(t, "tester", "echo SHOULD_NOT_RUN")
			stdin.Close()
			out := testutil.ReadAllAsync(stdout)
			if _, err := ta.agent.Launch(context.Background(), spec); err == nil {
				t.Fatal("Launch succeeded for a peer with the wrong credentials")
			}
			if got := testutil.RecvString(t, "stdout", out); got != "" {
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
