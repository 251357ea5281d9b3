package broker

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	gossh "golang.org/x/crypto/ssh"
)

// Bounds on the authorized_keys file: it is operator-supplied, but a wrong
// path (a log file, a device) must not make the server read without limit.
const (
	maxAuthorizedKeysSize = 1 << 20
	maxAuthorizedKeys     = 1000
)

// AuthorizedKeys is the set of client public keys allowed to log in.
type AuthorizedKeys struct {
	keys map[string]struct{} // key: wire encoding of the public key
}

// Contains reports whether key is authorized.
func (ak *AuthorizedKeys) Contains(key gossh.PublicKey) bool {
	_, ok := ak.keys[string(key.Marshal())]
	return ok
}

// Len returns the number of distinct keys.
func (ak *AuthorizedKeys) Len() int { return len(ak.keys) }

// LoadAuthorizedKeys reads an OpenSSH authorized_keys file. Key options
// (command=, from=, restrict, cert-authority, ...) are not implemented, so a
// line that carries any is refused with its line number instead of being
// honoured partially: an operator who wrote from="10.0.0.1" expects it to hold.
func LoadAuthorizedKeys(path string) (*AuthorizedKeys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("authorized keys: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxAuthorizedKeysSize+1))
	if err != nil {
		return nil, fmt.Errorf("authorized keys %s: %w", path, err)
	}
	if len(data) > maxAuthorizedKeysSize {
		return nil, fmt.Errorf("authorized keys %s: larger than %d bytes", path, maxAuthorizedKeysSize)
	}
	ak, err := parseAuthorizedKeys(data)
	if err != nil {
		return nil, fmt.Errorf("authorized keys %s: %w", path, err)
	}
	return ak, nil
}

func parseAuthorizedKeys(data []byte) (*AuthorizedKeys, error) {
	ak := &AuthorizedKeys{keys: make(map[string]struct{})}
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		key, _, options, _, err := gossh.ParseAuthorizedKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: not a public key line", i+1)
		}
		if len(options) > 0 {
			name, _, _ := bytes.Cut([]byte(options[0]), []byte("="))
			return nil, fmt.Errorf("line %d: key option %q is not supported; remove it or the key", i+1, name)
		}
		if _, isCert := key.(*gossh.Certificate); isCert {
			return nil, fmt.Errorf("line %d: certificates are not supported", i+1)
		}
		ak.keys[string(key.Marshal())] = struct{}{}
		if len(ak.keys) > maxAuthorizedKeys {
			return nil, fmt.Errorf("more than %d keys", maxAuthorizedKeys)
		}
	}
	if len(ak.keys) == 0 {
		return nil, errors.New("no keys")
	}
	return ak, nil
}

// HostKeyFile is the host key's name in the state directory (DESIGN §3.7).
const HostKeyFile = "ssh_host_ed25519_key"

// LoadOrCreateKey returns the ed25519 private key at path, generating it
// (mode 0600, created exclusively, with a .pub beside it) on first use. An
// existing key that is readable by others is refused, as sshd refuses it.
func LoadOrCreateKey(path, comment string) (gossh.Signer, error) {
	signer, err := loadKey(path)
	if !errors.Is(err, os.ErrNotExist) {
		return signer, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("key dir: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	block, err := gossh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	if err := writeExclusive(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	signer, err = gossh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	pub := append(bytes.TrimSpace(gossh.MarshalAuthorizedKey(signer.PublicKey())), ' ')
	pub = append(pub, comment+"\n"...)
	if err := os.WriteFile(path+".pub", pub, 0o644); err != nil {
		return nil, fmt.Errorf("write public key: %w", err)
	}
	return signer, nil
}

func loadKey(path string) (gossh.Signer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("key %s: permissions %04o are too open; it must be 0600", path, st.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	signer, err := gossh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	return signer, nil
}

func writeExclusive(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Sync()
}
