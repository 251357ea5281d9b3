package broker

import (
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
