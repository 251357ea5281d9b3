package broker

import (
	"slices"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

func TestDefaultAlgorithmsAreExplicitAndHardened(t *testing.T) {
	def := DefaultAlgorithms()
	if err := def.Check(); err != nil {
		t.Fatalf("defaults do not pass their own check: %v", err)
	}
	// What the library will send must be exactly the list: nothing dropped
	// as unimplemented, nothing added.
	if got := def.Offered(); !slices.Equal(got.KeyExchanges, def.KeyExchanges) ||
		!slices.Equal(got.Ciphers, def.Ciphers) || !slices.Equal(got.MACs, def.MACs) {
		t.Errorf("offered %+v, want %+v", got, def)
	}
	if bad := def.Insecure(); len(bad) > 0 {
		t.Errorf("defaults hold algorithms x/crypto classes insecure: %q", bad)
	}
	var lib gossh.Config
	lib.SetDefaults()
	if slices.Equal(lib.KeyExchanges, def.KeyExchanges) || slices.Equal(lib.MACs, def.MACs) {
		t.Error("defaults are the library's own")
	}
	for _, m := range def.MACs {
		if !strings.HasSuffix(m, "-etm@openssh.com") {
			t.Errorf("MAC %q is not encrypt-then-MAC", m)
		}
	}
	for _, k := range def.KeyExchanges {
		if strings.HasPrefix(k, "ecdh-sha2-nistp") || strings.HasSuffix(k, "-sha1") {
			t.Errorf("key exchange %q is on ssh-audit's fail or warn list", k)
		}
	}
}

func TestKnownAlgorithms(t *testing.T) {
	kex := KnownAlgorithms(KeyExchange)
	for _, want := range []string{gossh.KeyExchangeMLKEM768X25519, gossh.KeyExchangeCurve25519, curve25519LibSSH, gossh.InsecureKeyExchangeDH14SHA1} {
		if !slices.Contains(kex, want) {
			t.Errorf("known key exchanges %q lack %q", kex, want)
		}
	}
	// Strict-kex and ext-info markers are added by the library, not chosen.
	if slices.Contains(kex, "kex-strict-s-v00@openssh.com") || slices.Contains(KnownAlgorithms(MAC), "none") {
		t.Errorf("pseudo-algorithms listed as known")
	}
	if !slices.Contains(KnownAlgorithms(MAC), gossh.HMACSHA1) || !slices.Contains(KnownAlgorithms(Cipher), gossh.CipherAES128CTR) {
		t.Error("hmac-sha1 or aes128-ctr missing from the known lists")
	}
}

func TestApplyAlgorithmSpec(t *testing.T) {
	base := []string{gossh.HMACSHA256ETM, gossh.HMACSHA512ETM}
	tests := []struct {
		spec string
		want []string
	}{
		{"hmac-sha1", []string{gossh.HMACSHA1}},
		{" hmac-sha1 , hmac-sha2-256-etm@openssh.com ", []string{gossh.HMACSHA1, gossh.HMACSHA256ETM}},
		{"+hmac-sha1", []string{gossh.HMACSHA256ETM, gossh.HMACSHA512ETM, gossh.HMACSHA1}},
		{"+hmac-sha2-256-etm@openssh.com", base}, // already there: not doubled
		{"-hmac-sha2-512-etm@openssh.com", []string{gossh.HMACSHA256ETM}},
		{"^hmac-sha2-512-etm@openssh.com,hmac-sha1", []string{gossh.HMACSHA512ETM, gossh.HMACSHA1, gossh.HMACSHA256ETM}},
		{"+hmac-sha1*", []string{gossh.HMACSHA256ETM, gossh.HMACSHA512ETM, gossh.HMACSHA1, gossh.InsecureHMACSHA196}},
		{"-*512*", []string{gossh.HMACSHA256ETM}},
		{"hmac-sha2-???-etm@openssh.com", []string{gossh.HMACSHA256ETM, gossh.HMACSHA512ETM}},
	}
	for _, tc := range tests {
		got, err := ApplyAlgorithmSpec(MAC, base, tc.spec)
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q = %q, want %q", tc.spec, got, tc.want)
		}
	}
	if len(base) != 2 || base[0] != gossh.HMACSHA256ETM {
		t.Errorf("base list modified: %q", base)
	}
}

func TestApplyAlgorithmSpecErrors(t *testing.T) {
	base := DefaultAlgorithms().KeyExchanges
	tests := []struct{ spec, want string }{
		{"curve25519-sha257", `unknown key exchange algorithm "curve25519-sha257"`},
		{"+diffie-hellman-group14-sha1,sntrup761x25519-sha512", `unknown key exchange algorithm "sntrup761x25519-sha512"`},
		{"kex-strict-s-v00@openssh.com", "unknown key exchange algorithm"},
		{"-nosuch*", `pattern "nosuch*" matches no supported key exchange algorithm`},
		{"-*", "no key exchange algorithm left"},
		{"", "empty key exchange list"},
		{"+", "empty key exchange list"},
		{"curve25519-sha256,,mlkem768x25519-sha256", "empty name"},
		{strings.Repeat("a", maxAlgorithmSpec+1), "longer than"},
	}
	for _, tc := range tests {
		_, err := ApplyAlgorithmSpec(KeyExchange, base, tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40q: error %v, want one containing %q", tc.spec, err, tc.want)
		}
	}
	// The error lists what would have been accepted.
	_, err := ApplyAlgorithmSpec(Cipher, nil, "aes128-cbd")
	if err == nil || !strings.Contains(err.Error(), "supported: ") || !strings.Contains(err.Error(), gossh.CipherAES128CTR) {
		t.Errorf("error %v does not list the supported ciphers", err)
	}
}

func TestMatchPattern(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"hmac-sha1", "hmac-sha1", true},
		{"hmac-sha1", "hmac-sha1-96", false},
		{"hmac-sha1*", "hmac-sha1-96", true},
		{"*-etm@openssh.com", "hmac-sha2-256-etm@openssh.com", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*", "", true},
		{"*a*b", "xaxxb", true},
		{"*a*b", "xaxxbc", false},
		// A mismatch after the first byte, with no star to go back to.
		{"ab", "ax", false},
		{"abc", "abx", false},
		{strings.Repeat("*a", 2000) + "b", strings.Repeat("a", 60), false},
	} {
		if got := matchPattern(tc.pattern, tc.name); got != tc.want {
			t.Errorf("matchPattern(%.20q, %q) = %v", tc.pattern, tc.name, got)
		}
	}
}

func TestNewRefusesUnknownAlgorithm(t *testing.T) {
	cfg := testConfig(t)
	if _, err := New(cfg); err != nil {
		t.Fatalf("empty lists should mean the defaults: %v", err)
	}
	cfg.Algorithms = Algorithms{MACs: []string{"hmac-sha1", "umac-64@openssh.com"}}
	_, err := New(cfg)
	if err == nil || !strings.Contains(err.Error(), `unknown MAC algorithm "umac-64@openssh.com"`) {
		t.Fatalf("New = %v, want the unknown MAC named", err)
	}
}

// TestLibSSHAliasFollowsCurve25519: the libssh name of curve25519-sha256
// is listed right after it, where OpenSSH lists it.
func TestLibSSHAliasFollowsCurve25519(t *testing.T) {
	kex := KnownAlgorithms(KeyExchange)
	i := slices.Index(kex, gossh.KeyExchangeCurve25519)
	if i < 0 || i+1 >= len(kex) || kex[i+1] != curve25519LibSSH {
		t.Errorf("key exchanges %v: want %s right after %s", kex, curve25519LibSSH, gossh.KeyExchangeCurve25519)
	}
}

// TestAlgorithmSpecLengthBound: a setting of exactly maxAlgorithmSpec
// bytes is read; one byte more is refused by its length.
func TestAlgorithmSpecLengthBound(t *testing.T) {
	spec := gossh.CipherAES128CTR + strings.Repeat(",", maxAlgorithmSpec-len(gossh.CipherAES128CTR))
	if _, err := ApplyAlgorithmSpec(Cipher, nil, spec); err != nil && strings.Contains(err.Error(), "longer than") {
		t.Errorf("a %d-byte setting: %v, want it read", len(spec), err)
	}
	if _, err := ApplyAlgorithmSpec(Cipher, nil, spec+","); err == nil || !strings.Contains(err.Error(), "longer than 4096 bytes") {
		t.Errorf("a %d-byte setting: %v, want its length refused", len(spec)+1, err)
	}
}
