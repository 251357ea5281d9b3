package tests

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
)

// Pre-authentication exhaustion: the workload shares the sidecar's network
// namespace and can open idle TCP connections to the SSH port at will.
// TestPreauthFloodKeepsLoginAndHealth uses only the server's defaults and
// public behaviour, so it also runs (and fails) against a server without
// the pre-authentication gate.

// idleConn is a TCP connection that never speaks SSH, with the first line
// the server sent it ("" if the server closed it without one).
type idleConn struct {
	conn  net.Conn
	first string
}

func (c idleConn) admitted() bool { return strings.HasPrefix(c.first, "SSH-2.0-aptl-kali-capture") }

// refusedWith reports whether the server refused the connection with a
// line that names the reason.
func (c idleConn) refusedWith(reason string) bool {
	return strings.HasPrefix(c.first, "aptl-kali-capture: refused before authentication: "+reason)
}

// openIdle opens n connections from the loopback address source to addr
// and reads the first line of each, so the server has admitted or refused
// every one of them when it returns. They stay open until the test ends.
func openIdle(t *testing.T, addr, source string, n int) []idleConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	conns := make([]idleConn, 0, n)
	for range n {
		conn, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connect from %s: %v", source, err)
		}
		t.Cleanup(func() { conn.Close() })
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conns = append(conns, idleConn{conn: conn, first: line})
	}
	return conns
}

// tally counts the admitted connections and those refused with reason.
func tally(conns []idleConn, reason string) (admitted, refused int) {
	for _, c := range conns {
		switch {
		case c.admitted():
			admitted++
		case c.refusedWith(reason):
			refused++
		}
	}
	return admitted, refused
}

// stillOpen fails the test unless every admitted connection is still open:
// the server must not have made room by closing the flood's connections.
// A closed one reports EOF at once; an open one times out.
func stillOpen(t *testing.T, conns []idleConn) {
	t.Helper()
	buf := make([]byte, 1)
	for _, c := range conns {
		if !c.admitted() {
			continue
		}
		c.conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.conn.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("an admitted idle connection did not stay open: %v", err)
		}
	}
}

// TestPreauthFloodKeepsLoginAndHealth holds 100 idle connections from one
// address (more than the 64 connections the server allows) while a stock
// OpenSSH client logs in from another and `health` runs; then fills the
// health check's own address to its per-source limit, so health's
// connection is refused, and health must still pass.
func TestPreauthFloodKeepsLoginAndHealth(t *testing.T) {
	bin := buildForLiveTest(t)
	work := t.TempDir()
	ready := filepath.Join(work, "ready")
	_, sshArgs, logs := startServe(t, bin, work, "--ready-file", ready)
	port := sshArgs[1] // the printed command starts "ssh -p PORT"
	addr := "127.0.0.1:" + port
	waitFor(t, 10*time.Second, "the readiness file", func() bool {
		b, _ := os.ReadFile(ready)
		return strings.Contains(string(b), "launch=ok")
	})
	health := func() error {
		out, err := exec.Command(bin, "health", "--ready-file", ready, "--listen", addr).CombinedOutput()
		if err != nil {
			return errors.New(strings.TrimSpace(string(out)))
		}
		return nil
	}

	flood := openIdle(t, addr, "127.0.0.2", 100)
	out, err := exec.Command("ssh", append(sshArgs, "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "echo LOGIN_$((40+2))")...).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "LOGIN_42" {
		t.Fatalf("public-key login failed while 100 idle connections were open: %v\n%s\nserver logs:\n%s", err, out, logs.String())
	}
	if err := health(); err != nil {
		t.Fatalf("health failed while 100 idle connections were open: %v", err)
	}
	admitted, refused := tally(flood, "too many unauthenticated connections from this address")
	if admitted != 8 || refused != 92 {
		t.Errorf("one address's 100 idle connections: %d admitted, %d refused with the per-source reason; want 8 and 92", admitted, refused)
	}
	stillOpen(t, flood)

	// Health connects from 127.0.0.1: once that address holds its 8, the
	// server refuses health's connection, and health must still pass.
	own := openIdle(t, addr, "127.0.0.1", 9)
	if admitted, refused := tally(own, "too many unauthenticated connections from this address"); admitted != 8 || refused != 1 {
		t.Fatalf("127.0.0.1: %d admitted, %d refused; want 8 and 1", admitted, refused)
	}
	if err := health(); err != nil {
		t.Fatalf("health failed while its own connection was refused before authentication: %v", err)
	}
	stillOpen(t, append(flood, own...))
	if n := strings.Count(logs.String(), "connection refused before authentication"); n == 0 || n > 20 {
		t.Errorf("refusals were logged %d times for 93 refusals; want some, rate-limited", n)
	}
}

// TestPreauthFullTable fills the server's pre-authentication table from
// many addresses, through random early drop, up to max-startups' full:
// a new connection from a fresh address is then refused and told why,
// stock OpenSSH logs the reason (with -v), an open session keeps working, health
// passes, and closing the flood frees every slot.
func TestPreauthFullTable(t *testing.T) {
	h := newHarness(t)
	full := broker.DefaultLimits().MaxStartups.Full
	logged := h.dial(t)
	if n := h.srv.UnauthenticatedConns(); n != 0 {
		t.Fatalf("an authenticated connection still counts as unauthenticated: %d", n)
	}
	var flood []idleConn
	for i := 1; h.srv.UnauthenticatedConns() < full && i < 64; i++ {
		flood = append(flood, openIdle(t, h.addr, fmt.Sprintf("127.0.1.%d", i), 8)...)
	}
	if n := h.srv.UnauthenticatedConns(); n != full {
		t.Fatalf("%d connection attempts left %d unauthenticated, want max-startups full (%d)", len(flood), n, full)
	}
	if fresh := openIdle(t, h.addr, "127.0.2.1", 1)[0]; !fresh.refusedWith("too many unauthenticated connections\r\n") {
		t.Fatalf("a connection at full got %q", fresh.first)
	}
	if _, err := exec.LookPath("ssh"); err == nil {
		out, err := exec.Command("ssh", "-v", "-p", strings.TrimPrefix(h.addr, "127.0.0.1:"), "-i", h.clientKey,
			"-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", h.user+"@127.0.0.1", "true").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "too many unauthenticated connections") {
			t.Errorf("stock OpenSSH at full: %v, and it did not show the reason:\n%s", err, out)
		}
	}
	if stdout, _, err := run(t, logged, nil, "echo STILL_$((40+2))"); err != nil || stdout != "STILL_42\n" {
		t.Errorf("the open connection's new session at full: %q, %v", stdout, err)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	if err := os.WriteFile(ready, []byte("pty=ok\nlaunch=ok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(buildCommand(t), "health", "--ready-file", ready, "--listen", h.addr).CombinedOutput(); err != nil {
		t.Errorf("health at full: %v: %s", err, out)
	}
	stillOpen(t, flood)
	for _, c := range flood {
		c.conn.Close()
	}
	waitFor(t, 5*time.Second, "the flood's slots to be freed", func() bool { return h.srv.UnauthenticatedConns() == 0 })
}
