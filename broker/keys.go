package broker

import (
	"github.com/aptl/aptl-kali-capture/internal/vocab"

	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	gossh "golang.org/x/crypto/ssh"
)

// Bounds on the authorized_keys file: it is operator-supplied, but a wrong
// path (a log file, a device) must not make the server read without limit.
const (
	maxAuthorizedKeysSize = 1 << 20
	maxAuthorizedKeys     = 1000
)

// AuthorizedKeys is the set of client public keys allowed to log in, read
// from an authorized_keys file as sshd treats it: re-read when the file
// changes (sshd reads it at every authentication, so a lab rotates keys
// without a restart), lines with a key type this server cannot use skipped
// with a warning, and a file that group or others may write refused.
type AuthorizedKeys struct {
	path string // "" for a fixed set (tests)

	mu    sync.Mutex          // protects the following
	keys  map[string]struct{} // key: wire encoding of the public key
	stamp fileStamp           // of the file the keys were read from
	log   *slog.Logger        // for reloads; set by the server
	// pending are the skipped lines of the first read, logged once the
	// server has its logger (setLogger).
	pending []string
}

// fileStamp tells whether a file changed since it was read: a replaced
// file (rename) has another inode, an edited one another size or times.
type fileStamp struct {
	dev, ino, size uint64
	mtime, ctime   int64
}

func stampOf(st os.FileInfo) fileStamp {
	sys, _ := st.Sys().(*syscall.Stat_t)
	if sys == nil {
		return fileStamp{size: uint64(st.Size()), mtime: st.ModTime().UnixNano()}
	}
	return fileStamp{dev: uint64(sys.Dev), ino: sys.Ino, size: uint64(sys.Size),
		mtime: sys.Mtim.Nano(), ctime: sys.Ctim.Nano()}
}

// Contains reports whether key is authorized, by the file as it is now.
func (ak *AuthorizedKeys) Contains(key gossh.PublicKey) bool {
	ak.mu.Lock()
	defer ak.mu.Unlock()
	ak.refresh()
	_, ok := ak.keys[string(key.Marshal())]
	return ok
}

// Len returns the number of distinct keys.
func (ak *AuthorizedKeys) Len() int {
	ak.mu.Lock()
	defer ak.mu.Unlock()
	return len(ak.keys)
}

// setLogger sets where reloads are logged, and logs the lines the first
// read skipped.
func (ak *AuthorizedKeys) setLogger(log *slog.Logger) {
	ak.mu.Lock()
	defer ak.mu.Unlock()
	ak.log = log
	logWarnings(log, ak.pending)
	ak.pending = nil
}

// refresh re-reads the file when it changed. A file that can no longer be
// used (unreadable, writable by others, a refused line) authorizes no key
// until it is fixed, as sshd ignores such a file: keeping the old keys would
// keep a key the operator just removed. Callers hold mu.
func (ak *AuthorizedKeys) refresh() {
	if ak.path == "" {
		return
	}
	st, err := os.Stat(ak.path)
	if err == nil && stampOf(st) == ak.stamp {
		return
	}
	log := ak.log
	if log == nil {
		log = slog.Default()
	}
	next, err := readAuthorizedKeys(ak.path)
	if err != nil {
		if st != nil {
			ak.stamp = stampOf(st) // log a broken file once, not per attempt
		}
		ak.keys = nil
		log.Error("authorized keys refused on reload; no key is authorized until it is fixed", "err", err.Error())
		return
	}
	ak.keys, ak.stamp = next.keys, next.stamp
	logWarnings(log, next.pending)
	log.Info("authorized keys reloaded", "path", ak.path, "keys", len(ak.keys))
}

func logWarnings(log *slog.Logger, warnings []string) {
	for _, w := range warnings {
		log.Warn("authorized keys: line skipped", "reason", w)
	}
}

// LoadAuthorizedKeys reads an OpenSSH authorized_keys file. Key options
// (command=, from=, restrict, cert-authority, ...) are not implemented, so a
// line that carries any is refused with its line number instead of being
// honoured partially: an operator who wrote from="10.0.0.1" expects it to hold.
// A line whose key type this server cannot use (ssh-dss) is skipped with a
// warning naming it, as sshd skips it; the server logs the warnings.
func LoadAuthorizedKeys(path string) (*AuthorizedKeys, error) {
	return readAuthorizedKeys(path)
}

func readAuthorizedKeys(path string) (*AuthorizedKeys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("authorized keys: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("authorized keys %s: %w", path, err)
	}
	if err := checkStrictModes(st); err != nil {
		return nil, fmt.Errorf("authorized keys %s: %w", path, err)
	}
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
	for i := range ak.pending {
		ak.pending[i] = path + " " + ak.pending[i]
	}
	ak.path, ak.stamp = path, stampOf(st)
	return ak, nil
}

// checkStrictModes refuses what sshd's StrictModes refuses of the file
// itself: one that group or others may write (anyone who can write it can
// log in). The owner is not checked: a lab mounts the file from the host,
// owned by whoever made it.
func checkStrictModes(st os.FileInfo) error {
	if !st.Mode().IsRegular() {
		return errors.New("not a regular file")
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("writable by group or others (mode %04o), which sshd's StrictModes refuses too; chmod go-w it", perm)
	}
	return nil
}

// usableKeyType reports whether the server accepts a signature from a key
// of this type: x/crypto's client key algorithms (an ssh-rsa key signs with
// rsa-sha2-256/512). ssh-dss is not among them.
func usableKeyType(t string) bool {
	return t == gossh.KeyAlgoRSA || slices.Contains(gossh.SupportedAlgorithms().PublicKeyAuths, t)
}

// unusableKeyLine recognizes a well-formed key line, without options,
// whose type x/crypto cannot parse: "type base64-blob [comment]", where the
// blob starts with the same type name, as every SSH public key blob does.
// It returns the type (a printable name, safe to log).
func unusableKeyLine(line []byte) (string, bool) {
	fields := bytes.Fields(line)
	if len(fields) < 2 || len(fields[0]) > 64 {
		return "", false
	}
	blob, err := base64.StdEncoding.DecodeString(string(fields[1]))
	if err != nil || len(blob) < 4 {
		return "", false
	}
	n := binary.BigEndian.Uint32(blob)
	if uint64(n) != uint64(len(fields[0])) || len(blob) < 4+int(n) || !bytes.Equal(blob[4:4+n], fields[0]) {
		return "", false
	}
	for _, c := range fields[0] {
		if c <= ' ' || c > '~' {
			return "", false
		}
	}
	return string(fields[0]), true
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
			// x/crypto no longer parses some types (ssh-dss) at all.
			if t, ok := unusableKeyLine(line); ok {
				ak.pending = append(ak.pending, fmt.Sprintf("line %d: key type %s is not accepted by this server", i+1, t))
				continue
			}
			return nil, fmt.Errorf("line %d: not a public key line", i+1)
		}
		if len(options) > 0 {
			name, _, _ := bytes.Cut([]byte(options[0]), []byte("="))
			return nil, fmt.Errorf("line %d: key option %q is not supported; remove it or the key", i+1, name)
		}
		if _, isCert := key.(*gossh.Certificate); isCert {
			return nil, fmt.Errorf("line %d: certificates are not supported", i+1)
		}
		if !usableKeyType(key.Type()) {
			ak.pending = append(ak.pending, fmt.Sprintf("line %d: key type %s is not accepted by this server", i+1, key.Type()))
			continue
		}
		ak.keys[string(key.Marshal())] = struct{}{}
		if len(ak.keys) > maxAuthorizedKeys {
			return nil, fmt.Errorf("more than %d keys", maxAuthorizedKeys)
		}
	}
	if len(ak.keys) == 0 {
		return nil, errors.New("no keys to authorize")
	}
	return ak, nil
}

// HostKeyFile is the host key's name in the state directory; its one
// home is vocab, which the examiner's commands name it by too.
const HostKeyFile = vocab.HostKeyFile

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
