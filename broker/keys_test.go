package broker

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

func TestLoadOrCreateKeyIsStable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", HostKeyFile)
	k1, err := LoadOrCreateKey(path, "test")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key mode = %04o, want 0600", st.Mode().Perm())
	}
	k2, err := LoadOrCreateKey(path, "test")
	if err != nil {
		t.Fatal(err)
	}
	if string(k1.PublicKey().Marshal()) != string(k2.PublicKey().Marshal()) {
		t.Error("second load produced a different key")
	}
	if k1.PublicKey().Type() != gossh.KeyAlgoED25519 {
		t.Errorf("type = %s", k1.PublicKey().Type())
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	parsed, _, _, _, err := gossh.ParseAuthorizedKey(pub)
	if err != nil || string(parsed.Marshal()) != string(k1.PublicKey().Marshal()) {
		t.Errorf(".pub does not hold the key: %v", err)
	}
}

func TestLoadKeyRefusesOpenPermissions(t *testing.T) {
	path := filepath.Join(t.TempDir(), HostKeyFile)
	if _, err := LoadOrCreateKey(path, "test"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path, "test"); err == nil || !strings.Contains(err.Error(), "too open") {
		t.Fatalf("err = %v, want a permissions refusal", err)
	}
}

func TestParseAuthorizedKeys(t *testing.T) {
	signer, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "k"), "c")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
	tests := []struct {
		name, data, wantErr string
	}{
		{name: "plain", data: line + " me@host\n"},
		{name: "comments and blanks", data: "# keys\n\n" + line + "\n"},
		{name: "option refused", data: `from="10.0.0.1" ` + line + "\n", wantErr: `line 1: key option "from"`},
		{name: "restrict refused", data: "# c\nrestrict " + line + "\n", wantErr: `line 2: key option "restrict"`},
		{name: "garbage", data: "not a key\n", wantErr: "line 1: not a public key line"},
		{name: "empty", data: "# nothing\n", wantErr: "no keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ak, err := parseAuthorizedKeys([]byte(tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !ak.Contains(signer.PublicKey()) {
				t.Error("key not found")
			}
		})
	}
}

// keyLine returns an authorized_keys line for a fresh ed25519 key.
func keyLine(t *testing.T) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := gossh.NewPublicKey(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pub)))
}

// TestAuthorizedKeysBound: an authorized_keys file may hold
// maxAuthorizedKeys keys, not one more.
func TestAuthorizedKeysBound(t *testing.T) {
	lines := make([]string, 0, maxAuthorizedKeys+1)
	for range maxAuthorizedKeys + 1 {
		lines = append(lines, keyLine(t))
	}
	if _, err := parseAuthorizedKeys([]byte(strings.Join(lines[:maxAuthorizedKeys], "\n"))); err != nil {
		t.Errorf("%d keys: %v", maxAuthorizedKeys, err)
	}
	if _, err := parseAuthorizedKeys([]byte(strings.Join(lines, "\n"))); err == nil || !strings.Contains(err.Error(), "more than 1000 keys") {
		t.Errorf("%d keys: %v, want the bound named", maxAuthorizedKeys+1, err)
	}
}

// TestAuthorizedRSAKey: an ssh-rsa key is authorized (it signs with
// rsa-sha2-256/512, which the server accepts).
func TestAuthorizedRSAKey(t *testing.T) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := gossh.NewPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	ak, err := parseAuthorizedKeys(gossh.MarshalAuthorizedKey(pub))
	if err != nil || !ak.Contains(pub) {
		t.Errorf("an ssh-rsa key: %v, want it authorized", err)
	}
}

// Equivalent mutants (gremlins): keys.go unusableKeyLine's `len(blob) < 4`
// -> `<= 4` (a 4-byte blob names a type of length 0, and a key line's
// type is never empty) and `c <= ' '` -> `<` (the fields of a line hold no
// space).

// TestUnusableKeyLine: a well-formed line of a key type x/crypto cannot
// parse (ssh-dss) is recognized, so the file loads with that key stated
// as not accepted; a line whose blob does not start with its own type
// name, or is too short to hold one, is not a key line.
func TestUnusableKeyLine(t *testing.T) {
	blob := func(typ string, extra int) string {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(typ)))
		b = append(append(b, typ...), make([]byte, extra)...)
		return base64.StdEncoding.EncodeToString(b)
	}
	long := strings.Repeat("t", 64)
	for _, tt := range []struct {
		name, line, want string
		ok               bool
	}{
		{"ssh-dss", "ssh-dss " + blob("ssh-dss", 8) + " old@host", "ssh-dss", true},
		{"a type name of 64 bytes", long + " " + blob(long, 0), long, true},
		{"a type name of 65 bytes", long + "t " + blob(long+"t", 0), "", false},
		{"a blob naming another type", "ssh-dss " + blob("ssh-rsa", 8), "", false},
		{"a blob of 4 bytes", "ssh-dss " + base64.StdEncoding.EncodeToString([]byte{0, 0, 0, 0}), "", false},
		{"a blob of 3 bytes", "ssh-dss " + base64.StdEncoding.EncodeToString([]byte{0, 0, 7}), "", false},
		{"a blob shorter than its type", "ssh-dss " + base64.StdEncoding.EncodeToString([]byte{0, 0, 0, 7, 's', 's', 'h'}), "", false},
		{"not base64", "ssh-dss ***", "", false},
		{"a type alone", "ssh-dss", "", false},
		{"a type with a control byte", "ssh\x01dss " + blob("ssh\x01dss", 0), "", false},
		{"a type ending in the last printable byte", "ssh-dss~ " + blob("ssh-dss~", 0), "ssh-dss~", true},
		{"a type with a byte past it", "ssh-dss\x7f " + blob("ssh-dss\x7f", 0), "", false},
	} {
		got, ok := unusableKeyLine([]byte(tt.line))
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: %q %v, want %q %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	ak, err := parseAuthorizedKeys([]byte("ssh-dss " + blob("ssh-dss", 8) + "\n" + keyLine(t) + "\n"))
	if err != nil || len(ak.pending) != 1 || !strings.Contains(ak.pending[0], "line 1: key type ssh-dss is not accepted") {
		t.Errorf("a file with an ssh-dss key and an ed25519 key: %v, pending %q", err, ak.pending)
	}
}
