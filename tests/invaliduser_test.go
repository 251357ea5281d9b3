package tests

import (
	"bytes"
	"os"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/launch/local"
)

// withUsers allows these login names, with the local adapter's account
// check as serve sets it up.
func withUsers(users ...string) harnessOption {
	return func(c *broker.Config) {
		c.Users = users
		if l, ok := c.Launcher.(*local.Local); ok {
			c.UserExists = l.UserExists
		}
	}
}

// TestInvalidUserRefused: on a root server, an allowed login name without
// an account is refused at authentication, as sshd refuses an "Invalid
// user", instead of getting a root shell; the log says who, from where,
// with which key and why.
func TestInvalidUserRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a server that is not root runs every session as its own user")
	}
	h := newHarness(t, withUsers("root", "nosuchuser"))
	cmd := h.opensshAs(t, "nosuchuser", "id -un")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := exitCode(t, cmd.Run())
	if code != 255 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "Permission denied") {
		t.Fatalf("ssh nosuchuser@: exit %d, stdout %q, stderr %q; want a refused login", code, stdout.String(), stderr.String())
	}
	logs := h.logs.String()
	fp := gossh.FingerprintSHA256(h.client.PublicKey())
	if !strings.Contains(logs, "authentication refused") || !strings.Contains(logs, "reason=\"invalid user: no such account\"") ||
		!strings.Contains(logs, "key="+fp) || !strings.Contains(logs, "remote=127.0.0.1:") {
		t.Errorf("log does not say who was refused, from where, with which key and why:\n%s", logs)
	}
	// root, which exists, still logs in.
	out, err := h.opensshAs(t, "root", "id -un").Output()
	if err != nil || string(out) != "root\n" {
		t.Fatalf("ssh root@: %q %v", out, err)
	}
	if entries, _ := os.ReadDir(h.root + "/openssh"); len(entries) != 1 {
		t.Errorf("records: %v, want only root's", entries)
	}
}

// TestAuthFailureLogged: a key that is not authorized, and a login name
// that is not allowed, are logged with the address, the key's fingerprint
// and the reason.
func TestAuthFailureLogged(t *testing.T) {
	h := newHarness(t)
	other, err := broker.LoadOrCreateKey(h.stateDir+"/other", "other")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := gossh.Dial("tcp", h.addr, h.clientConfig(h.user, other)); err == nil {
		c.Close()
		t.Fatal("an unauthorized key logged in")
	}
	if c, err := gossh.Dial("tcp", h.addr, h.clientConfig("not-"+h.user, h.client)); err == nil {
		c.Close()
		t.Fatal("a user not allowed logged in")
	}
	logs := h.logs.String()
	for _, want := range []string{
		"key=" + gossh.FingerprintSHA256(other.PublicKey()) + " reason=\"key not authorized\"",
		"key=" + gossh.FingerprintSHA256(h.client.PublicKey()) + " reason=\"user not allowed\"",
	} {
		if !strings.Contains(logs, want) || !strings.Contains(logs, "remote=127.0.0.1:") {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}
