package tests

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// Faults the tool servers' sessions meet. Covered elsewhere: a full
// capture filesystem mid-session (TestFullDiskStopsDelivery), a client that
// stops reading during a flood (TestStalledClientLosesNothing), sequential
// sessions without leaks (TestNoLeaksAfterSequentialSessions), one
// session cut by SIGKILL (TestSidecarKilledMidSession).

// TestFaultClientTCPReset: the client vanishes with a TCP reset in the
// middle of an output flood. The record is finalized with client-closed
// (also with pty-eof=eof and hangup: the Read's EOF that a dead connection
// produces must not be taken for a client EOF), verifies, and holds every
// byte the client received.
func TestFaultClientTCPReset(t *testing.T) {
	for _, mode := range []broker.PTYEOF{broker.PTYEOFIgnore, broker.PTYEOFChar, broker.PTYEOFHangup} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newHarness(t, withPTYEOF(mode))
			tcp, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			sc, chans, reqs, err := gossh.NewClientConn(tcp, h.addr, h.clientConfig(h.user, h.client))
			if err != nil {
				t.Fatal(err)
			}
			c := gossh.NewClient(sc, chans, reqs)
			ss := openShell(t, c, map[string]string{"APTL_SESSION_ID": "rst-1"}, 24, 80)
			ss.send("echo FLOOD_START; seq 1 2000000\n")
			ss.waitOutput(regexp.MustCompile(`FLOOD_START\r\n(?s:.*)\r\n1000\r\n`))
			// SO_LINGER 0: close sends RST, not FIN; the client is gone.
			tcp.(*net.TCPConn).SetLinger(0)
			tcp.Close()
			h.waitIdle(t)
			dir := h.sessionDir("_unbound", "rst-1")
			checkFinalized(t, dir, h.hostKey, "client-closed")
			received := []byte(ss.received.String())
			if out := replay(t, dir, "out"); !bytes.HasPrefix(out, received) {
				t.Errorf("the record (%d bytes) does not hold the %d bytes the client received (first difference at %d)", len(out), len(received), firstDiff(out, received))
			}
		})
	}
}

// liveServer is the built binary serving in its own folder, and an
// x/crypto client configuration for it.
type liveServer struct {
	srv     interface{ Signal(os.Signal) error }
	wait    func() error
	addr    string
	work    string
	hostKey gossh.PublicKey
	config  *gossh.ClientConfig
	logs    *testutil.LockedBuffer
}

// startLiveServer builds the binary and serves in a new folder.
func startLiveServer(t *testing.T, extra ...string) *liveServer {
	t.Helper()
	return startLiveServerIn(t, buildForLiveTest(t), t.TempDir(), extra...)
}

// startLiveServerIn serves with the built binary bin in work: a folder
// a server served in before keeps its capture root, host key and client
// key, as a restart on the same volume does (the crash campaign).
func startLiveServerIn(t *testing.T, bin, work string, extra ...string) *liveServer {
	t.Helper()
	srv, sshArgs, logs := startServe(t, bin, work, append([]string{"--ready-file", filepath.Join(work, "ready")}, extra...)...)
	// The printed command: ssh -p PORT -i KEY ... USER@HOST.
	var port, keyPath, login string
	for i, a := range sshArgs {
		switch {
		case a == "-p" && i+1 < len(sshArgs):
			port = sshArgs[i+1]
		case a == "-i" && i+1 < len(sshArgs):
			keyPath = sshArgs[i+1]
		case strings.Contains(a, "@"):
			login = a
		}
	}
	user, host, _ := strings.Cut(login, "@")
	signer, err := broker.LoadOrCreateKey(keyPath, "")
	if err != nil || port == "" || host == "" {
		t.Fatalf("cannot log in with the printed command %q: %v", sshArgs, err)
	}
	key := readHostKey(t, filepath.Join(work, "aptl-dev", "state"))
	return &liveServer{
		srv: srv.Process, wait: srv.Wait, addr: net.JoinHostPort(host, port), work: work, hostKey: key, logs: logs,
		config: &gossh.ClientConfig{User: user, Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)}, HostKeyCallback: gossh.FixedHostKey(key), Timeout: 10 * time.Second},
	}
}

// openLiveSessions opens n PTY shells, 10 per connection, each with its
// output marker seen, and returns their record folders.
func (ls *liveServer) openLiveSessions(t *testing.T, n int) []string {
	t.Helper()
	var c *gossh.Client
	var dirs []string
	for i := 0; i < n; i++ {
		if i%10 == 0 {
			var err error
			if c, err = gossh.Dial("tcp", ls.addr, ls.config); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}
		id := fmt.Sprintf("s%d", i)
		ss := openShell(t, c, map[string]string{"APTL_SESSION_ID": id, "APTL_RUN_ID": "fault"}, 24, 80)
		ss.send("echo \"UP_$((40+2))\"; seq 1 200\n")
		ss.waitOutput(regexp.MustCompile(`UP_42\r\n(?s:.*)200\r\n`))
		dirs = append(dirs, ls.sessionDir("fault", id))
	}
	return dirs
}

// sessionDir is the record folder of session id in run.
func (ls *liveServer) sessionDir(run, id string) string {
	return filepath.Join(ls.work, "aptl-dev", "captures", run, id)
}

// TestFaultSIGTERMWithOpenSessions: SIGTERM to the sidecar with 50 open
// sessions (10 in the short form) finalizes every record with close reason
// sidecar-shutdown, and each verifies OK.
func TestFaultSIGTERMWithOpenSessions(t *testing.T) {
	t.Parallel() // see parallel_test.go
	n := 10
	if slowTests {
		n = 50
	}
	ls := startLiveServer(t)
	dirs := ls.openLiveSessions(t, n)
	if err := ls.srv.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := ls.wait(); err != nil {
		t.Fatalf("serve did not stop cleanly on SIGTERM: %v", err)
	}
	for _, d := range dirs {
		checkFinalized(t, d, ls.hostKey, "sidecar-shutdown")
	}
}

// TestFaultSIGKILLWithOpenSessions: SIGKILL with sessions open leaves every
// record unfinalized, and verify says so for each: none is OK.
func TestFaultSIGKILLWithOpenSessions(t *testing.T) {
	t.Parallel() // see parallel_test.go
	ls := startLiveServer(t)
	dirs := ls.openLiveSessions(t, 12)
	if err := ls.srv.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ls.wait()
	for _, d := range dirs {
		rep := evidence.Verify(d, evidence.Keys{Trusted: []gossh.PublicKey{ls.hostKey}}, evidence.Options{})
		if rep.OK() || rep.Finalized || !strings.Contains(fmt.Sprint(rep.Anomalies), "unfinalized") {
			t.Errorf("%s after SIGKILL: OK=%v finalized=%v anomalies %v, want unfinalized", d, rep.OK(), rep.Finalized, rep.Anomalies)
		}
	}
}

// withClientAlive sets the server's keepalive probing (broker/keepalive.go).
func withClientAlive(interval time.Duration, countMax int) harnessOption {
	return func(c *broker.Config) { c.ClientAlive = broker.ClientAlive{Interval: interval, CountMax: countMax} }
}

// dialFreezingProxy returns a client connection to target through a
// loopback proxy, and freeze: after it, the proxy forwards nothing more in
// either direction and closes neither side, so to both ends the connection
// looks half-open, as when the client's host vanishes without FIN or RST.
// The sockets are closed at the test's end.
func dialFreezingProxy(t *testing.T, target string) (client net.Conn, freeze func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	server, err := net.Dial("tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	frozen, ended := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		close(ended)
		client.Close()
		accepted.Close()
		server.Close()
	})
	forward := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			select {
			case <-frozen: // hold the bytes, read no more, close nothing
				<-ended
				return
			default:
			}
			if n > 0 {
				dst.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}
	go forward(server, accepted)
	go forward(accepted, server)
	return client, func() { close(frozen) }
}

// TestFaultClientHalfOpen: the client's connection goes half-open during
// an output flood (its host gone: no FIN, no RST, nothing answered). With
// client alive probing (200 ms x 3) the server closes the connection; the
// record is finalized with client-closed, verifies, and holds every byte
// the client received.
func TestFaultClientHalfOpen(t *testing.T) {
	t.Parallel() // see parallel_test.go
	h := newHarness(t, withClientAlive(200*time.Millisecond, 3))
	tcp, freeze := dialFreezingProxy(t, h.addr)
	sc, chans, reqs, err := gossh.NewClientConn(tcp, h.addr, h.clientConfig(h.user, h.client))
	if err != nil {
		t.Fatal(err)
	}
	c := gossh.NewClient(sc, chans, reqs)
	ss := openShell(t, c, map[string]string{"APTL_SESSION_ID": "halfopen-1"}, 24, 80)
	ss.send("echo FLOOD_START; seq 1 2000000\n")
	ss.waitOutput(regexp.MustCompile(`FLOOD_START\r\n(?s:.*)\r\n1000\r\n`))
	freeze()
	// 4 intervals of silence, the hangup and the drain; far below the
	// minutes TCP keepalive would take.
	waitFor(t, 10*time.Second, "the half-open session finalized", func() bool { return h.srv.ActiveSessions() == 0 })
	dir := h.sessionDir("_unbound", "halfopen-1")
	checkFinalized(t, dir, h.hostKey, "client-closed")
	received := []byte(ss.received.String())
	if out := replay(t, dir, "out"); !bytes.HasPrefix(out, received) {
		t.Errorf("the record (%d bytes) does not hold the %d bytes the client received (first difference at %d)", len(out), len(received), firstDiff(out, received))
	}
}

// TestClientAliveAnswered: a client that answers the server's keepalive
// probes keeps its connection however long it stays silent otherwise, also
// when the answer is a failure (x/crypto and node ssh2 answer unknown
// global requests so), and OpenSSH answers them too.
func TestClientAliveAnswered(t *testing.T) {
	t.Parallel() // see parallel_test.go
	t.Run("x/crypto failure replies", func(t *testing.T) {
		h := newHarness(t, withClientAlive(100*time.Millisecond, 2))
		tcp, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		sc, chans, reqs, err := gossh.NewClientConn(tcp, h.addr, h.clientConfig(h.user, h.client))
		if err != nil {
			t.Fatal(err)
		}
		var probes atomic.Int32
		answered := make(chan *gossh.Request)
		go func() {
			for req := range reqs {
				if req.Type == "keepalive@openssh.com" {
					probes.Add(1)
				}
				req.Reply(false, nil)
			}
			close(answered)
		}()
		c := gossh.NewClient(sc, chans, answered)
		defer c.Close()
		if _, _, err := run(t, c, nil, "true"); err != nil {
			t.Fatal(err)
		}
		// Five probes in a row answered with failure: more than the two
		// unanswered ones that would close the connection.
		waitFor(t, 5*time.Second, "five keepalive probes", func() bool { return probes.Load() >= 5 })
		if out, _, err := run(t, c, nil, "echo still-here"); err != nil || !strings.Contains(out, "still-here") {
			t.Errorf("connection after answered probes: output %q, err %v", out, err)
		}
	})
	t.Run("node ssh2", func(t *testing.T) {
		nodeClient(t)
		h := newHarness(t, withClientAlive(100*time.Millisecond, 2))
		host, port, _ := net.SplitHostPort(h.addr)
		portN, _ := strconv.Atoi(port)
		res := runNodeClient(t, map[string]any{
			"host": host, "port": portN, "username": h.user, "privateKeyPath": h.clientKey,
			"hostKey": base64.StdEncoding.EncodeToString(h.hostKey.Marshal()),
			"env":     map[string]string{"APTL_SESSION_ID": "alive-node"},
			"command": "sleep 1.5; echo still-here",
		})
		if !res.OK || res.Output == nil || *res.Output != "still-here\r\n" {
			t.Errorf("node ssh2 silent for 15 intervals: %+v", res)
		}
		if strings.Contains(h.logs.String(), "client silent") {
			t.Errorf("server closed a node ssh2 connection that answers keepalives:\n%s", h.logs.String())
		}
	})
	t.Run("OpenSSH", func(t *testing.T) {
		h := newHarness(t, withClientAlive(100*time.Millisecond, 2))
		cmd := h.openssh(t, "sleep 1.5; echo still-here")
		cmd.Env = append(cmd.Env, "APTL_SESSION_ID=alive-ossh")
		out, err := cmd.CombinedOutput()
		if exitCode(t, err) != 0 || !strings.Contains(string(out), "still-here") {
			t.Errorf("ssh silent for 15 intervals: exit %v, output %q", err, out)
		}
		if strings.Contains(h.logs.String(), "client silent") {
			t.Errorf("server closed an OpenSSH connection that answers keepalives:\n%s", h.logs.String())
		}
	})
}

// TestClientAliveNoLeaks is TestNoLeaksAfterSequentialSessions with client
// alive probing on: each connection's keepalive loop ends when the
// connection closes. The interval is long so that no loop ends on its own
// by closing a connection it finds silent.
func TestClientAliveNoLeaks(t *testing.T) {
	testNoLeaksAfterSequentialSessions(t, withClientAlive(time.Hour, 3))
}
