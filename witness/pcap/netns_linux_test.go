package pcap_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	gossh "golang.org/x/crypto/ssh"
)

// The namespace suite: a sidecar (the real binary) serving in a network
// namespace of its own with two veth interfaces and loopback; peers in two
// more namespaces. Every address is in a namespace the test makes, and
// everything is removed at the end.

// lab is the test's namespaces and its running sidecar.
type lab struct {
	t       *testing.T
	prefix  string // namespace and link name prefix, unique per run
	side    string // the sidecar's namespace
	peers   []string
	root    string // capture root
	state   string
	ready   string
	cmd     *exec.Cmd
	stderr  *testutil.LockedBuffer // written by the command's copy goroutine while the test reads it
	signer  gossh.Signer
	hostPub []byte
}

const sidecarAddr = "10.231.1.1"

// requireNetns skips unless the test may make network namespaces.
func requireNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the namespace suite needs root (ip netns, veth pairs, CAP_NET_RAW)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the namespace suite needs ip (Debian iproute2)")
	}
	name := fmt.Sprintf("aptlprobe%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("network namespaces are not permitted here: ip netns add: %v: %s", err, out)
	}
	exec.Command("ip", "netns", "del", name).Run()
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newLab makes the namespaces: side with vethA (10.231.1.1/24) to peer 1
// (10.231.1.2) and vethB (10.231.2.1/24) to peer 2 (10.231.2.2).
func newLab(t *testing.T) *lab {
	requireNetns(t)
	p := fmt.Sprintf("apc%d", os.Getpid()%100000)
	l := &lab{t: t, prefix: p, side: p + "s", peers: []string{p + "p1", p + "p2"}}
	for _, ns := range append([]string{l.side}, l.peers...) {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	for i, peer := range l.peers {
		l.link(fmt.Sprintf("%sv%d", p, i+1), peer, fmt.Sprintf("10.231.%d", i+1))
	}
	return l
}

// link adds a veth pair between side (net.1) and peer (net.2).
func (l *lab) link(name, peer, net string) {
	t := l.t
	run(t, "ip", "link", "add", name, "netns", l.side, "type", "veth", "peer", "name", name+"p", "netns", peer)
	run(t, "ip", "-n", l.side, "addr", "add", net+".1/24", "dev", name)
	run(t, "ip", "-n", peer, "addr", "add", net+".2/24", "dev", name+"p")
	run(t, "ip", "-n", l.side, "link", "set", name, "up")
	run(t, "ip", "-n", peer, "link", "set", name+"p", "up")
}

var binPath string

// buildSidecar builds the binary once per test process.
func buildSidecar(t *testing.T) string {
	t.Helper()
	if binPath != "" {
		return binPath
	}
	dir, err := os.MkdirTemp("", "aptl-pcap-bin")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "aptl-kali-capture")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/aptl/aptl-kali-capture/cmd/aptl-kali-capture")
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":/usr/local/go/bin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the sidecar: %v: %s", err, out)
	}
	binPath = bin
	return bin
}

// serve starts the sidecar in ns (or the root namespace with ns ""),
// listening on addr, with extra environment, optionally through a
// wrapper that runs a shell command line (capsh ... --); it waits for
// the readiness file.
func serve(t *testing.T, ns, addr string, env []string, wrap ...string) *lab {
	l := &lab{t: t, side: ns}
	base := t.TempDir()
	l.root, l.state, l.ready = filepath.Join(base, "captures"), filepath.Join(base, "state"), filepath.Join(base, "ready")
	args := []string{buildSidecar(t), "serve"}
	if len(wrap) > 0 {
		// A wrapper (capsh ... --) runs a shell command line.
		args = append(append([]string{}, wrap...), "-c", "exec "+args[0]+" serve")
	}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	l.cmd = exec.Command(args[0], args[1:]...)
	l.cmd.Env = append(os.Environ(), "APTL_CAPTURE_LISTEN="+addr, "APTL_CAPTURE_ROOT="+l.root,
		"APTL_CAPTURE_STATE_DIR="+l.state, "APTL_CAPTURE_READY_FILE="+l.ready, "APTL_CAPTURE_USERS=root",
		"APTL_CAPTURE_LOG_LEVEL=debug")
	l.cmd.Env = append(l.cmd.Env, env...)
	l.stderr = &testutil.LockedBuffer{}
	l.cmd.Stderr, l.cmd.Stdout = l.stderr, l.stderr
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := testutil.Stop(l.cmd, testutil.StopGrace); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("sidecar output:\n%s", l.stderr.String())
		}
	})
	waitFor(t, 20*time.Second, "the readiness file", func() bool { _, err := os.Stat(l.ready); return err == nil })
	key, err := os.ReadFile(filepath.Join(l.state, "client_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	if l.signer, err = gossh.ParsePrivateKey(key); err != nil {
		t.Fatal(err)
	}
	if l.hostPub, err = os.ReadFile(filepath.Join(l.state, "ssh_host_ed25519_key.pub")); err != nil {
		t.Fatal(err)
	}
	return l
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		runtime.Gosched()
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// readiness returns the readiness file's key=value lines.
func (l *lab) readiness() map[string]string {
	b, _ := os.ReadFile(l.ready)
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			m[k] = v
		}
	}
	return m
}

// sendUDP sends payload from ns to addr:port.
func sendUDP(t *testing.T, ns, addr string, payload string) {
	testutil.InNetns(t, ns, func() error {
		c, err := net.Dial("udp4", net.JoinHostPort(addr, "9999"))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte(payload))
		return err
	})
}

// session is an open SSH session that runs `cat` without a PTY: it stays
// open until end closes its stdin.
type session struct {
	id     string
	client *gossh.Client
	sess   *gossh.Session
	stdin  io.WriteCloser
	dir    string
}

// open logs in from ns to addr and starts session id; it returns once the
// session's open record is on disk (so its window is open).
func (l *lab) open(ns, addr, run, id string) *session {
	t := l.t
	var conn net.Conn
	testutil.InNetns(t, ns, func() (err error) {
		conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	cfg := &gossh.ClientConfig{User: "root", Auth: []gossh.AuthMethod{gossh.PublicKeys(l.signer)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}
	c, chans, reqs, err := gossh.NewClientConn(conn, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := gossh.NewClient(c, chans, reqs)
	s, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"APTL_RUN_ID": run, "APTL_SESSION_ID": id} {
		if err := s.Setenv(k, v); err != nil {
			t.Fatal(err)
		}
	}
	stdin, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("cat"); err != nil {
		t.Fatal(err)
	}
	ss := &session{id: id, client: client, sess: s, stdin: stdin, dir: filepath.Join(l.root, run, id)}
	waitFor(t, 10*time.Second, "the open record of "+id, func() bool { return logHas(ss.dir, `"type":"open"`) })
	return ss
}

// end closes the session's stdin and returns once its close record is on
// disk (so its window is closed).
func (l *lab) end(s *session) {
	s.stdin.Close()
	s.sess.Wait()
	s.client.Close()
	waitFor(l.t, 10*time.Second, "the close record of "+s.id, func() bool { return logHas(s.dir, `"type":"close"`) })
	waitFor(l.t, 10*time.Second, "the last checkpoint of "+s.id, func() bool { return lastLineHas(s.dir, `"type":"checkpoint"`) && logHas(s.dir, `"type":"close"`) })
}

func logHas(dir, s string) bool {
	b, _ := os.ReadFile(filepath.Join(dir, "pty", "integrity.jsonl"))
	return bytes.Contains(b, []byte(s))
}

func lastLineHas(dir, s string) bool {
	b, _ := os.ReadFile(filepath.Join(dir, "pty", "integrity.jsonl"))
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return len(lines) > 0 && bytes.Contains(lines[len(lines)-1], []byte(s))
}

// udpOnce sends one datagram to addr:9999 from the calling thread's namespace.
func udpOnce(addr, payload string) error {
	c, err := net.Dial("udp4", net.JoinHostPort(addr, "9999"))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(payload))
	return err
}
