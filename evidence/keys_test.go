package evidence

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

func testKeyLine(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := gossh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(k)))
}

// TestParseKeysRefusesWhatItCannotHonour: a @revoked line without a host
// pattern (which ssh.ParseAuthorizedKey reads as an option, trusting the
// key) and authorized_keys options in any case (CERT-AUTHORITY) are
// refused, naming the line; never read as a trusted key.
func TestParseKeysRefusesWhatItCannotHonour(t *testing.T) {
	key := testKeyLine(t)
	for _, tc := range []struct{ line, want string }{
		{"@revoked " + key, "line 2: a line starting with '@'"},
		{"@REVOKED " + key, "line 2: a line starting with '@'"},
		{"@bogus * " + key, "line 2: unknown known_hosts marker @bogus"},
		{"CERT-AUTHORITY " + key, "line 2: a cert-authority key is refused"},
		{"Cert-Authority,from=\"10.0.0.1\" " + key, "line 2: a cert-authority key is refused"},
		{"from=\"10.0.0.1\" " + key, `line 2: key options (here "from")`},
		{"restrict " + key, `line 2: key options (here "restrict")`},
		{"No-Pty " + key, `line 2: key options (here "no-pty")`},
	} {
		keys, err := ParseKeys([]byte("# keys\n"+tc.line+"\n"), "k")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.30q: got trusted %d revoked %d, err %v; want an error containing %q",
				tc.line, len(keys.Trusted), len(keys.Revoked), err, tc.want)
		}
	}
	// What is honoured still is.
	keys, err := ParseKeys([]byte(key+"\nhost "+key+"\n@revoked * "+key+"\n"), "k")
	if err != nil || len(keys.Trusted) != 2 || len(keys.Revoked) != 1 {
		t.Errorf("plain, known_hosts and @revoked lines: trusted %d revoked %d, err %v; want 2, 1, nil", len(keys.Trusted), len(keys.Revoked), err)
	}
}

// TestParseKeysCountsEveryKey: a file is refused for holding no keys only
// when it holds neither a trusted nor a revoked one. A revocation list
// alone is read (it refuses, trusts nothing), and so is a known_hosts
// file that trusts one key and revokes another.
func TestParseKeysCountsEveryKey(t *testing.T) {
	trusted, revoked := testKeyLine(t), testKeyLine(t)
	for _, tc := range []struct {
		name             string
		data             string
		trusted, revoked int
		err              string
	}{
		{"comments only", "# no keys yet\n\n", 0, 0, "k: no keys"},
		{"revoked only", "@revoked * " + revoked + "\n", 0, 1, ""},
		{"one trusted, one revoked", "sidecar " + trusted + "\n@revoked * " + revoked + "\n", 1, 1, ""},
	} {
		keys, err := ParseKeys([]byte(tc.data), "k")
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if gotErr != tc.err || len(keys.Trusted) != tc.trusted || len(keys.Revoked) != tc.revoked {
			t.Errorf("%s: trusted %d revoked %d, err %q; want %d, %d, %q", tc.name, len(keys.Trusted), len(keys.Revoked), gotErr, tc.trusted, tc.revoked, tc.err)
		}
	}
}
