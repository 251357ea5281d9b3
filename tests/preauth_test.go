package tests

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
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

// perSourceReason is the refusal line's reason past the per-source limit.
const perSourceReason = "too many unauthenticated connections from this address"

// withLocalAddrs declares which peer addresses the server counts as its
// own network namespace's (one pre-authentication source): on loopback
// every address is local, so a test that needs "another host" declares
// fewer.
func withLocalAddrs(local ...string) harnessOption {
	set := map[netip.Addr]bool{}
	for _, a := range local {
		set[netip.MustParseAddr(a)] = true
	}
	return func(c *broker.Config) { c.IsLocalAddr = func(a netip.Addr) bool { return set[a] } }
}

// TestPreauthLocalFloodSharesOneBudget runs the binary on its defaults: the
// workload, sharing the network namespace, floods from several loopback
// addresses, and they share one per-source budget (8 of max-startups'
// 32), so they cannot fill the table that tool servers from other hosts
// need. Health passes while its own connection is refused, and once the
// flood ends a stock OpenSSH login succeeds.
func TestPreauthLocalFloodSharesOneBudget(t *testing.T) {
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

	flood := openIdle(t, addr, "127.0.0.2", 100)
	if admitted, refused := tally(flood, perSourceReason); admitted != 8 || refused != 92 {
		t.Errorf("one address's 100 idle connections: %d admitted, %d refused with the per-source reason; want 8 and 92", admitted, refused)
	}
	for _, other := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.1"} {
		more := openIdle(t, addr, other, 1)
		if !more[0].refusedWith(perSourceReason) {
			t.Errorf("after 8 from 127.0.0.2, a connection from %s got %q; want the per-source refusal (one budget for every local address)", other, more[0].first)
		}
		flood = append(flood, more...)
	}
	out, err := exec.Command(bin, "health", "--ready-file", ready, "--listen", addr).CombinedOutput()
	if err != nil {
		t.Fatalf("health failed while its own connection was refused before authentication: %v: %s", err, out)
	}
	stillOpen(t, flood)
	if n := strings.Count(logs.String(), "connection refused before authentication"); n == 0 || n > 20 {
		t.Errorf("refusals were logged %d times for 96 refusals; want some, rate-limited", n)
	}

	for _, c := range flood {
		c.conn.Close()
	}
	waitFor(t, 10*time.Second, "a local connection to be admitted after the flood", func() bool {
		c := openIdle(t, addr, "127.0.0.3", 1)[0]
		c.conn.Close()
		return c.admitted()
	})
	out, err = exec.Command("ssh", append(sshArgs, "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "echo LOGIN_$((40+2))")...).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "LOGIN_42" {
		t.Fatalf("public-key login after the flood: %v\n%s\nserver logs:\n%s", err, out, logs.String())
	}
}

// TestPreauthLocalFloodKeepsRemoteLogin floods from four loopback
// addresses, 8 each, declared local to the server, while a stock OpenSSH
// client from an address declared remote (a tool server) logs in: the
// flood holds one source's 8 slots, not the table.
func TestPreauthLocalFloodKeepsRemoteLogin(t *testing.T) {
	h := newHarness(t, withLocalAddrs("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"))
	var flood []idleConn
	for i := 2; i <= 5; i++ {
		flood = append(flood, openIdle(t, h.addr, fmt.Sprintf("127.0.0.%d", i), 8)...)
	}
	if admitted, refused := tally(flood, perSourceReason); admitted != 8 || refused != 24 {
		t.Fatalf("32 idle connections from 4 local addresses: %d admitted, %d refused with the per-source reason; want 8 and 24", admitted, refused)
	}
	if n := h.srv.UnauthenticatedConns(); n != 8 {
		t.Fatalf("unauthenticated = %d, want 8", n)
	}
	out, err := h.openssh(t, "-o", "ConnectTimeout=10", "echo LOGIN_$((40+2))").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "LOGIN_42" {
		t.Fatalf("login from another source during the local flood: %v\n%s\nserver logs:\n%s", err, out, h.logs.String())
	}
	stillOpen(t, flood)
}

// TestPreauthFullTable fills the server's pre-authentication table from
// many addresses, through random early drop, up to max-startups' full:
// a new connection from a fresh address is then refused and told why,
// stock OpenSSH logs the reason (with -v), an open session keeps working, health
// passes, and closing the flood frees every slot.
func TestPreauthFullTable(t *testing.T) {
	// Built before the flood: a build under load can outlast the
	// server's grace for the flood's idle connections.
	bin := buildCommand(t)
	h := newHarness(t, withLocalAddrs()) // every address its own source, as tool servers are

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
	if out, err := exec.Command(bin, "health", "--ready-file", ready, "--listen", h.addr).CombinedOutput(); err != nil {
		t.Errorf("health at full: %v: %s", err, out)
	}
	stillOpen(t, flood)
	for _, c := range flood {
		c.conn.Close()
	}
	waitFor(t, 5*time.Second, "the flood's slots to be freed", func() bool { return h.srv.UnauthenticatedConns() == 0 })
}
