package tests

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/examine"
)

// Faults the tool servers' sessions meet. Covered elsewhere: a full
// capture filesystem mid-session (TestFullDiskStopsDelivery), a client that
// stops reading during a flood (TestStalledClientLosesNothing), sequential
// sessions without leaks (TestNoLeaksAfterSequentialSessions), one
// session cut by SIGKILL (TestSidecarKilledMidSession).

// TestFaultClientTCPReset: the client vanishes with a TCP reset in the
// middle of an output flood. The record is finalized with client-closed
// (also with pty-eof=hangup: the Read's EOF that a dead connection
// produces must not be taken for a client EOF), verifies, and holds every
// byte the client received.
func TestFaultClientTCPReset(t *testing.T) {
	for _, mode := range []broker.PTYEOF{broker.PTYEOFIgnore, broker.PTYEOFHangup} {
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
}

func startLiveServer(t *testing.T, extra ...string) *liveServer {
	t.Helper()
	bin := buildForLiveTest(t)
	work := t.TempDir()
	srv, sshArgs, _ := startServe(t, bin, work, append([]string{"--ready-file", filepath.Join(work, "ready")}, extra...)...)
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
		srv: srv.Process, wait: srv.Wait, addr: net.JoinHostPort(host, port), work: work, hostKey: key,
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
		dirs = append(dirs, filepath.Join(ls.work, "aptl-dev", "captures", "fault", id))
	}
	return dirs
}

// TestFaultSIGTERMWithOpenSessions: SIGTERM to the sidecar with 50 open
// sessions (10 in the short form) finalizes every record with close reason
// sidecar-shutdown, and each verifies OK.
func TestFaultSIGTERMWithOpenSessions(t *testing.T) {
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
	ls := startLiveServer(t)
	dirs := ls.openLiveSessions(t, 12)
	if err := ls.srv.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ls.wait()
	for _, d := range dirs {
		rep := examine.Verify(d, []gossh.PublicKey{ls.hostKey})
		if rep.OK() || rep.Finalized || !strings.Contains(fmt.Sprint(rep.Anomalies), "unfinalized") {
			t.Errorf("%s after SIGKILL: OK=%v finalized=%v anomalies %v, want unfinalized", d, rep.OK(), rep.Finalized, rep.Anomalies)
		}
	}
}
