package bench

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"

	gossh "golang.org/x/crypto/ssh"
)

// loginRC is the login user's whole shell start-up: no distribution
// .bashrc, no prompt hooks, so that every target starts the same plain
// bash --login (a slow rc would hide the servers' differences).
const loginRC = "PS1='$ '\n"

// account is the login user every target serves, made by the benchmark
// when it does not exist and removed again at the end in that case.
type account struct {
	name    string
	home    string
	created bool
}

func ensureAccount(name string) (*account, error) {
	a := &account{name: name}
	if _, err := user.Lookup(name); err != nil {
		if out, err := exec.Command("useradd", "--create-home", "--shell", "/bin/bash", name).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("useradd %s: %v: %s", name, err, out)
		}
		a.created = true
	}
	// "*": no password, but not locked, which sshd without PAM refuses.
	if out, err := exec.Command("usermod", "-p", "*", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("usermod -p '*' %s: %v: %s", name, err, out)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	a.home = u.HomeDir
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, rc := range []string{".bashrc", ".bash_profile"} {
		text := loginRC
		if rc == ".bash_profile" {
			text = ". ~/.bashrc\n"
		}
		p := filepath.Join(a.home, rc)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return nil, err
		}
		if err := os.Chown(p, uid, gid); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (a *account) remove() {
	if a.created {
		exec.Command("userdel", "--remove", a.name).Run()
	}
}

// hostKey makes an Ed25519 key and writes its private half in OpenSSH form
// to path (mode 0600, as sshd requires).
func newKeyFile(path string) (gossh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return gossh.NewSignerFromKey(priv)
}

// freePort asks the kernel for a loopback port nobody listens on.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// checkTools names the first missing prerequisite.
func checkTools(sshd string) error {
	if os.Geteuid() != 0 {
		return errors.New("the benchmark runs as root: it starts sshd, adds a login user and the server's pcap witness needs CAP_NET_RAW")
	}
	for _, tool := range []string{sshd, "script", "node", "useradd", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: %w (Debian: apt-get install openssh-server util-linux nodejs passwd)", tool, err)
		}
	}
	return nil
}
