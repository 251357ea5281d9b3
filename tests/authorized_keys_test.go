package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
)

// dssLine is an authorized_keys line with an ssh-dss key (made by
// OpenSSH 9.2's ssh-keygen -t dsa), a type this server cannot use.
const dssLine = "ssh-dss AAAAB3NzaC1kc3MAAACBAIw9ZtatsCL/MvSPxoMoKw32FZTyulHkYwvCQPTpN1TVAhdC5DFHbbSStRZlo+BjJeXLKMVUa49LfRdllQHA+3cRMoY8wBifkusZpXbg6QNAtBFmZWuRHV1NHz2Ps7WNNK/7RooOJ5w1DDuKgLUTmWSwraPzjpw7yPvMgGLujSz7AAAAFQCleIloRowa9zCwxzr1UmJEFpzL0QAAAIBnJrDzcB6nEAj3lrBrxoCq8n2YQwhSnncI/NxBe413Pi2LKeVf15oW9p09co6CX/Woi6HdV2UFks9HkVyr/NON7f7TRuqi3/fa6Otx2qFOt+iCcLvHrIABVN8+cykfbaeBoIL1Ta7/4FFbaDQMEgzp78AG9eg0R7GzTpS60GkD1QAAAIAcfWTcw9LdB/5VfHKCieJtRvGKxIhXLBItxEXMA3tSFgYDV2E2nn8MK5m8rHLDPqIaQFSfFdWNJS+SrZcvOgvHIfGlB7hhavO5qBW2gStpc8RGHnKkw5Ivmb3v+X/aO16kbx9LBYgmTpDbfCSPxVjgv0YGgnZhl8qy/Oq1sPK3aw== old-dss"

// replaceFile writes data to path by rename, as a lab's rotation does.
func replaceFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestAuthorizedKeysRotationWithoutRestart: the running server takes a new
// authorized_keys at the next authentication: the new key logs in, the
// removed one no longer does, and an ssh-dss line is skipped with a warning
// naming its line instead of breaking the file.
func TestAuthorizedKeysRotationWithoutRestart(t *testing.T) {
	h := newHarness(t)
	c := h.dial(t)
	c.Close()
	next, err := broker.LoadOrCreateKey(filepath.Join(h.stateDir, "next"), "next")
	if err != nil {
		t.Fatal(err)
	}
	ak := filepath.Join(h.stateDir, "authorized_keys")
	replaceFile(t, ak, "# rotated\n"+dssLine+"\n"+string(gossh.MarshalAuthorizedKey(next.PublicKey())))
	c2, err := gossh.Dial("tcp", h.addr, h.clientConfig(h.user, next))
	if err != nil {
		t.Fatalf("the rotated-in key was refused: %v\n%s", err, h.logs.String())
	}
	c2.Close()
	if c3, err := gossh.Dial("tcp", h.addr, h.clientConfig(h.user, h.client)); err == nil {
		c3.Close()
		t.Error("the rotated-out key still logs in")
	}
	if logs := h.logs.String(); !strings.Contains(logs, "line 2: key type ssh-dss is not accepted by this server") {
		t.Errorf("no warning naming the ssh-dss line:\n%s", logs)
	}
}

// TestAuthorizedKeysSkipsDSSAtLoad: an ssh-dss line does not stop the
// server from starting; the other keys load.
func TestAuthorizedKeysSkipsDSSAtLoad(t *testing.T) {
	dir := t.TempDir()
	k, err := broker.LoadOrCreateKey(filepath.Join(dir, "k"), "k")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "authorized_keys")
	os.WriteFile(path, []byte(dssLine+"\n"+string(gossh.MarshalAuthorizedKey(k.PublicKey()))), 0o600)
	ak, err := broker.LoadAuthorizedKeys(path)
	if err != nil {
		t.Fatalf("an ssh-dss line refused the file: %v", err)
	}
	if ak.Len() != 1 || !ak.Contains(k.PublicKey()) {
		t.Errorf("keys = %d, want the ed25519 one", ak.Len())
	}
}

// TestAuthorizedKeysStrictModes: a file that group or others may write is
// refused at load and, once it becomes so, at the next authentication.
func TestAuthorizedKeysStrictModes(t *testing.T) {
	h := newHarness(t)
	ak := filepath.Join(h.stateDir, "authorized_keys")
	for _, mode := range []os.FileMode{0o620, 0o602} {
		if err := os.Chmod(ak, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := broker.LoadAuthorizedKeys(ak); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
			t.Errorf("mode %04o: err = %v, want a StrictModes refusal", mode, err)
		}
		if c, err := gossh.Dial("tcp", h.addr, h.clientConfig(h.user, h.client)); err == nil {
			c.Close()
			t.Errorf("mode %04o: logged in with a key from a file others may write", mode)
		}
	}
	if err := os.Chmod(ak, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := gossh.Dial("tcp", h.addr, h.clientConfig(h.user, h.client))
	if err != nil {
		t.Fatalf("after chmod 600 the key is still refused: %v", err)
	}
	c.Close()
}
