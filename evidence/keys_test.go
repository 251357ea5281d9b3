package evidence

import (
	"crypto/ed25519"
	"crypto/rand"
	"slices"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
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
// key), authorized_keys options in any case (but cert-authority, which
// makes a CA) and known_hosts @cert-authority (host certificates) are
// refused, naming the line; never read as a trusted key.
func TestParseKeysRefusesWhatItCannotHonour(t *testing.T) {
	key := testKeyLine(t)
	for _, tc := range []struct{ line, want string }{
		{"@revoked " + key, "line 2: a line starting with '@'"},
		{"@REVOKED " + key, "line 2: a line starting with '@'"},
		{"@bogus * " + key, "line 2: unknown known_hosts marker @bogus"},
		{"Cert-Authority,from=\"10.0.0.1\" " + key, `line 2: key options (here "from")`},
		{"@cert-authority *.lab " + key, "line 2: @cert-authority lines are refused"},
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

// TestParseKeysAllowedSigners: an allowed_signers cert-authority line is
// a CA for its principals, an authorized_keys cert-authority line one for
// vocab.SignerPrincipal, and an allowed_signers line without it a plain
// key; namespaces must allow the session's two, a validity window, an
// unknown option and a certificate given as a key are refused, naming
// the line.
func TestParseKeysAllowedSigners(t *testing.T) {
	key := testKeyLine(t)
	both := `namespaces="` + integrity.HeadNamespace + "," + integrity.ManifestNamespace + `"`
	for _, tc := range []struct {
		line        string
		trusted, ca int
		principals  []string
		want        string // the error's, or "" when read
	}{
		{vocab.SignerPrincipal + " cert-authority " + key + " ca@lab", 0, 1, []string{vocab.SignerPrincipal}, ""},
		{`"a,b" CERT-AUTHORITY,` + both + " " + key, 0, 1, []string{"a", "b"}, ""},
		{`x cert-authority,namespaces="aptl-kali-capture-*" ` + key, 0, 1, []string{"x"}, ""},
		{"cert-authority " + key, 0, 1, []string{vocab.SignerPrincipal}, ""},
		{vocab.SignerPrincipal + " " + key, 1, 0, nil, ""},
		{vocab.SignerPrincipal + " " + both + " " + key, 1, 0, nil, ""},
		{`p cert-authority,namespaces="` + integrity.HeadNamespace + `" ` + key, 0, 0, nil, "line 2: namespaces=\"aptl-kali-capture-head\" leaves out " + integrity.ManifestNamespace},
		{`p namespaces="git,file" ` + key, 0, 0, nil, "leaves out " + integrity.HeadNamespace + " and " + integrity.ManifestNamespace},
		{`p cert-authority,namespaces="aptl-kali-capture-*,!*-manifest" ` + key, 0, 0, nil, "leaves out " + integrity.ManifestNamespace},
		{`p cert-authority,valid-after="20250101" ` + key, 0, 0, nil, "line 2: the allowed_signers option valid-after is refused"},
		{`p Valid-Before="20250101" ` + key, 0, 0, nil, "option valid-before is refused"},
		{`p cert-authority,bogus ` + key, 0, 0, nil, `line 2: unknown allowed_signers option "bogus"`},
		{vocab.SignerPrincipal + " " + testCertLine(t), 0, 0, nil, "line 2: a certificate is not a trusted key"},
	} {
		keys, err := ParseKeys([]byte("# signers\n"+tc.line+"\n"), "k")
		switch {
		case tc.want != "":
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%.50q: err %v, want one containing %q", tc.line, err, tc.want)
			}
		case err != nil || len(keys.Trusted) != tc.trusted || len(keys.Authorities) != tc.ca:
			t.Errorf("%.50q: trusted %d CAs %d, err %v; want %d, %d", tc.line, len(keys.Trusted), len(keys.Authorities), err, tc.trusted, tc.ca)
		case tc.ca == 1 && !slices.Equal(keys.Authorities[0].Principals, tc.principals):
			t.Errorf("%.50q: principals %q, want %q", tc.line, keys.Authorities[0].Principals, tc.principals)
		}
	}
}

// testCertLine is a user certificate in authorized_keys form.
func testCertLine(t *testing.T) string {
	t.Helper()
	ca, key := testutil.NewSigner(), testutil.NewSigner()
	cert := &gossh.Certificate{Key: key.PublicKey(), CertType: gossh.UserCert, ValidPrincipals: []string{vocab.SignerPrincipal}, ValidBefore: gossh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(gossh.MarshalAuthorizedKey(cert)))
}
