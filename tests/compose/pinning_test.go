package compose

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// TestPinningRefusesImpostor: a server on the lab's address that presents
// another host key (a squatter with its own sshd) is refused, with a
// host-key error, by the pinned configurations compose/INTEGRATION.md
// shows: stock ssh with StrictHostKeyChecking=yes and the sidecar's
// known_hosts line, and node ssh2 with a hostVerifier on the key. The same
// clients unpinned run their command on the impostor: that is what pinning
// prevents.
func TestPinningRefusesImpostor(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("OpenSSH client not installed")
	}
	dir := t.TempDir()
	port := startImpostor(t)
	mustRun(t, 10*time.Second, nil, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, "client"))
	// The key the lab pinned: the sidecar's, which the impostor lacks.
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	pinned, _ := gossh.NewPublicKey(pub)
	blob := strings.Fields(string(gossh.MarshalAuthorizedKey(pinned)))
	line := fmt.Sprintf("[127.0.0.1]:%d %s %s\n", port, blob[0], blob[1])
	if err := os.WriteFile(filepath.Join(dir, "known_hosts"), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	sshArgs := func(opts ...string) []string {
		return append(append([]string{"-p", strconv.Itoa(port), "-i", filepath.Join(dir, "client"), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"},
			opts...), "kali@127.0.0.1", "echo from-client")
	}

	out, err := run(t, 20*time.Second, nil, "ssh", sshArgs("-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile="+filepath.Join(dir, "known_hosts"))...)
	if err == nil || strings.Contains(out, "IMPOSTOR") || !strings.Contains(out, "Host key verification failed") {
		t.Errorf("pinned stock ssh against the impostor: want a host-key refusal, got %v\n%s", err, out)
	}
	out, err = run(t, 20*time.Second, nil, "ssh", sshArgs("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null")...)
	if err != nil || !strings.Contains(out, "IMPOSTOR") {
		t.Errorf("unpinned stock ssh should have reached the impostor (the test's premise): %v\n%s", err, out)
	}

	s := &liveStack{t: t, dir: dir, port: port}
	out, err = s.node("pin-test", blob[1], "echo from-ssh2")
	if errors.Is(err, errNoNode) {
		t.Skip("stock ssh checked; " + err.Error())
	}
	if strings.Contains(out, `"ok":true`) || !strings.Contains(strings.ToLower(out), "verification failed") {
		t.Errorf("pinned node ssh2 against the impostor: want a host-key refusal, got %v\n%s", err, out)
	}
	// connect.js opens a shell: the impostor's shell ending (exit 0) is the
	// unpinned client's session on it.
	out, _ = s.node("pin-test", "unpinned", "echo from-ssh2")
	if !strings.Contains(out, `"shellExit":0`) || strings.Contains(strings.ToLower(out), "verification failed") {
		t.Errorf("unpinned node ssh2 should have reached the impostor (the test's premise):\n%s", out)
	}
}

// startImpostor runs an SSH server with a fresh host key that accepts any
// public key and answers every exec or shell with IMPOSTOR.
func startImpostor(t *testing.T) int {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &gossh.ServerConfig{PublicKeyCallback: func(gossh.ConnMetadata, gossh.PublicKey) (*gossh.Permissions, error) { return nil, nil }}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveImpostor(c, cfg)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func serveImpostor(c net.Conn, cfg *gossh.ServerConfig) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	_, chans, reqs, err := gossh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go gossh.DiscardRequests(reqs)
	for nc := range chans {
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		for r := range creqs {
			r.Reply(true, nil)
			if r.Type == "exec" || r.Type == "shell" {
				ch.Write([]byte("IMPOSTOR\r\n"))
				status := make([]byte, 4)
				binary.BigEndian.PutUint32(status, 0)
				ch.SendRequest("exit-status", false, status)
				ch.Close()
				break
			}
		}
	}
}
