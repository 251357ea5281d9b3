package agentclient

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/launchtest"
)

var okStarted = func() []byte {
	return agentwire.StartedMsg{User: "tester", UID: 1000, GID: 1000, Home: "/home/tester", Shell: "/bin/sh", Note: "fake",
		AuditSes: 42, AuditReported: true,
		Instance: agentwire.Instance{ID: strings.Repeat("0f", 16), PID: 1, Started: time.Unix(1796112666, 0).UTC()}}.Encode()
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
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, make([]byte, agentwire.MaxReplyFrame), 0))
		}, "frame larger than"},
		{"truncated header", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, []byte{0, 1, byte(agentwire.TypeStarted)})
		}, "truncated frame: 3 bytes"},
		{"truncated body", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.RawFrame(agentwire.Version, agentwire.TypeStarted, 0, len(okStarted)+10, okStarted))
		}, "truncated started frame"},
		{"body ends inside a field", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, okStarted[:len(okStarted)-2], 0))
		}, "body ends inside a field"},
		{"trailing bytes", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, append(append([]byte{}, okStarted...), 0), 0))
		}, "after the last field"},
		{"wrong version", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.RawFrame(agentwire.Version+1, agentwire.TypeStarted, 0, len(okStarted), okStarted))
		}, "frame version 2"},
		{"unknown op", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(99, nil, 0))
		}, "unexpected unknown(99) frame"},
		{"request type as reply", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeSpawn, nil, 0))
		}, "unexpected spawn frame"},
		{"fd sent back", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, okStarted, 1), testutil.DevNull(t))
		}, "agent sent 1 fds with a started frame; closed them"},
		{"undeclared fd", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, okStarted, 0), testutil.DevNull(t))
		}, "declares 0 fds, 1 arrived"},
		{"many fds", func(t *testing.T, c *net.UnixConn) {
			n := testutil.DevNull(t)
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, okStarted, 8), n, n, n, n, n, n, n, n)
		}, "more than 3 fds"},
		{"declared fd missing", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, okStarted, 1))
		}, "declares 1 fds, 0 arrived"},
		{"another user", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, agentwire.StartedMsg{User: "root", Shell: "/bin/sh"}.Encode(), 0))
		}, "another user"},
		{"error reply", func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeError, agentwire.ErrorMsg{Code: agentwire.CodeNotAllowed, Message: "no"}.Encode(), 0))
		}, "refused the request: user-not-allowed"},
		{"closes at once", func(t *testing.T, c *net.UnixConn) {}, "peer closed the connection"},
		{"silent", func(t *testing.T, c *net.UnixConn) {
			time.Sleep(300 * time.Millisecond) // past the 100ms reply timeout: the condition under test
		}, "no answer within 100ms"},
		{"slow", func(t *testing.T, c *net.UnixConn) {
			time.Sleep(300 * time.Millisecond)
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, okStarted, 0))
		}, "no answer within 100ms"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			testutil.LeakCheck(t)
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
	p, fakeDone, err := startAgainstFake(t, fake)
	<-fakeDone
	if err == nil {
		p.Hangup()
		p.Wait()
	}
	return err
}

// startAgainstFake is launchAgainstFake without the waiting: fake runs on
// (fakeDone is closed when it returns) while the caller uses the process.
func startAgainstFake(t *testing.T, fake func(*testing.T, *net.UnixConn)) (launch.Process, <-chan struct{}, error) {
	t.Helper()
	sidecar, agentEnd := testutil.SeqpacketPair(t)
	a := &Agent{socket: "@fake", dialTimeout: time.Second, replyTimeout: 100 * time.Millisecond, exitWait: 200 * time.Millisecond,
		dial: func(context.Context) (*net.UnixConn, error) { return sidecar, nil }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer agentEnd.Close()
		f, err := agentwire.ReadFrame(agentEnd, agentwire.MaxRequestFrame, agentwire.TypeSpawn)
		f.CloseFiles()
		if err != nil {
			t.Errorf("fake agent: %v", err)
			return
		}
		fake(t, agentEnd)
	}()
	spec, stdin, stdout, stderr := launchtest.PipeSpec(t, "tester", "true")
	p, err := a.Launch(context.Background(), spec)
	stdin.Close()
	stdout.Close()
	stderr.Close()
	if err != nil {
		sidecar.Close() // Launch closed it; a no-op that keeps the leak check honest
	}
	return p, done, err
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
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeExit, agentwire.ExitMsg{Code: 7}.Encode(), 0))
		}, ""},
		{"vanishes", false, func(t *testing.T, c *net.UnixConn) {}, "closed the connection without an exit status"},
		{"fd with the exit", false, func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeExit, agentwire.ExitMsg{Code: 7}.Encode(), 1), testutil.DevNull(t))
		}, "agent sent 1 fds with a exit frame"},
		{"impossible status", false, func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeExit, agentwire.ExitMsg{Code: 300}.Encode(), 0))
		}, "not a wait status"},
		{"code and signal", false, func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeExit, agentwire.ExitMsg{Code: 1, Signal: 9}.Encode(), 0))
		}, "not a wait status"},
		{"error", false, func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeError, agentwire.ErrorMsg{Code: "agent-shutdown", Message: "bye"}.Encode(), 0))
		}, "agent-shutdown"},
		{"oversized", false, func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeExit, make([]byte, agentwire.MaxReplyFrame), 0))
		}, "frame larger than"},
		{"started twice", false, func(t *testing.T, c *net.UnixConn) {
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, okStarted, 0))
		}, "unexpected started frame"},
		{"silent after hang-up", true, func(t *testing.T, c *net.UnixConn) {
			// Reads the hang-up (EOF) and then says nothing: past exitWait.
			agentwire.ReadFrame(c, agentwire.MaxRequestFrame, agentwire.TypeSignal)
			time.Sleep(500 * time.Millisecond)
		}, "no exit status within 200ms of the hang-up"},
		{"exit after hang-up", true, func(t *testing.T, c *net.UnixConn) {
			if _, err := agentwire.ReadFrame(c, agentwire.MaxRequestFrame, agentwire.TypeSignal); !errors.Is(err, agentwire.ErrPeerClosed) {
				t.Errorf("fake agent: hang-up read = %v, want EOF", err)
			}
			agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeExit, agentwire.ExitMsg{Signal: uint32(syscall.SIGHUP)}.Encode(), 0))
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			testutil.LeakCheck(t)
			p, fakeDone, err := startAgainstFake(t, func(t *testing.T, c *net.UnixConn) {
				agentwire.SendRecord(c, testutil.GoodFrame(agentwire.TypeStarted, okStarted, 0))
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
