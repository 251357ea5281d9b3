package broker

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	gossh "golang.org/x/crypto/ssh"
)

// Algorithms are the transport algorithms the server offers, each list in
// order of preference. They are chosen here rather than inherited from
// golang.org/x/crypto/ssh, whose defaults include NIST-curve ECDH,
// diffie-hellman-group14-sha1, hmac-sha1(-96) and encrypt-and-MAC modes
// (docs/OPERATING.md "Algorithms" has the ssh-audit result of both lists).
type Algorithms struct {
	KeyExchanges []string
	Ciphers      []string
	MACs         []string
}

// AlgorithmKind names one of the three negotiated lists.
type AlgorithmKind int

const (
	KeyExchange AlgorithmKind = iota
	Cipher
	MAC
)

// AlgorithmKinds lists every kind, in the order settings are shown.
var AlgorithmKinds = []AlgorithmKind{KeyExchange, Cipher, MAC}

func (k AlgorithmKind) String() string {
	switch k {
	case KeyExchange:
		return "key exchange"
	case Cipher:
		return "cipher"
	case MAC:
		return "MAC"
	}
	return fmt.Sprintf("AlgorithmKind(%d)", int(k))
}

// List returns the list of one kind.
func (a Algorithms) List(k AlgorithmKind) []string {
	return *a.field(k)
}

// With returns a copy of a with the list of kind k replaced.
func (a Algorithms) With(k AlgorithmKind, list []string) Algorithms {
	*a.field(k) = slices.Clone(list)
	return a
}

func (a *Algorithms) field(k AlgorithmKind) *[]string {
	switch k {
	case KeyExchange:
		return &a.KeyExchanges
	case Cipher:
		return &a.Ciphers
	case MAC:
		return &a.MACs
	}
	panic("broker: unknown algorithm kind " + k.String())
}

// DefaultAlgorithms is what a hardening guide keeps, and what every client
// of the suite negotiates: OpenSSH 9.2, paramiko 2.12, asyncssh, x/crypto
// and node ssh2 1.17.
//   - Key exchange: the post-quantum hybrid, then X25519. Both names of the
//     X25519 exchange are listed, because paramiko 2.12 knows only the
//     @libssh.org one.
//   - Ciphers: the AEAD ciphers first; the CTR ciphers only because
//     paramiko 2.12 has no AEAD cipher (it negotiates aes128-ctr with an
//     encrypt-then-MAC MAC).
//   - MACs: encrypt-then-MAC with SHA-2 only; AEAD ciphers need no MAC.
//
// The host key is ed25519 (LoadOrCreateKey), and strict key exchange
// (kex-strict-s-v00@openssh.com) is added by x/crypto to every list.
func DefaultAlgorithms() Algorithms {
	return Algorithms{
		KeyExchanges: []string{
			gossh.KeyExchangeMLKEM768X25519,
			gossh.KeyExchangeCurve25519,
			curve25519LibSSH,
		},
		Ciphers: []string{
			gossh.CipherChaCha20Poly1305,
			gossh.CipherAES256GCM,
			gossh.CipherAES128GCM,
			gossh.CipherAES256CTR,
			gossh.CipherAES192CTR,
			gossh.CipherAES128CTR,
		},
		MACs: []string{
			gossh.HMACSHA256ETM,
			gossh.HMACSHA512ETM,
		},
	}
}

// curve25519LibSSH is the pre-RFC name of curve25519-sha256, which x/crypto
// implements but does not export.
const curve25519LibSSH = "curve25519-sha256@libssh.org"

// orDefault fills each empty list with the default one.
func (a Algorithms) orDefault() Algorithms {
	def := DefaultAlgorithms()
	for _, k := range AlgorithmKinds {
		if len(a.List(k)) == 0 {
			a = a.With(k, def.List(k))
		}
	}
	return a
}

// Check reports the first list that is empty or names an algorithm the
// library does not implement. The library itself would silently drop such
// a name (ssh.Config.SetDefaults), so a typo would go unnoticed.
func (a Algorithms) Check() error {
	for _, k := range AlgorithmKinds {
		list := a.List(k)
		if len(list) == 0 {
			return fmt.Errorf("the %s list is empty", k)
		}
		for _, name := range list {
			if !slices.Contains(KnownAlgorithms(k), name) {
				return unknownAlgorithm(k, name)
			}
		}
	}
	return nil
}

// Offered returns the lists as x/crypto will send them in its KEXINIT,
// empty lists meaning the default ones. It differs from a when
// curve25519-sha256 is listed without its @libssh.org alias: the library
// then appends the alias.
func (a Algorithms) Offered() Algorithms {
	a = a.orDefault()
	c := gossh.Config{KeyExchanges: a.KeyExchanges, Ciphers: a.Ciphers, MACs: a.MACs}
	c.SetDefaults() // drops unknown names, adds the @libssh.org alias
	return Algorithms{KeyExchanges: c.KeyExchanges, Ciphers: c.Ciphers, MACs: c.MACs}
}

// Insecure returns the algorithms in a that x/crypto itself classes as
// insecure, for a warning at start.
func (a Algorithms) Insecure() []string {
	bad := fromLibrary(gossh.InsecureAlgorithms())
	var out []string
	for _, k := range AlgorithmKinds {
		for _, name := range a.List(k) {
			if slices.Contains(bad.List(k), name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// KnownAlgorithms returns every algorithm of kind k that the linked x/crypto
// implements, secure ones first, in the library's order of preference.
func KnownAlgorithms(k AlgorithmKind) []string {
	all := slices.Concat(
		fromLibrary(gossh.SupportedAlgorithms()).List(k),
		fromLibrary(gossh.InsecureAlgorithms()).List(k))
	if k == KeyExchange {
		i := slices.Index(all, gossh.KeyExchangeCurve25519)
		all = slices.Insert(all, i+1, curve25519LibSSH)
	}
	var out []string
	for _, name := range all {
		if !slices.Contains(out, name) && libraryImplements(k, name) {
			out = append(out, name)
		}
	}
	return out
}

// libraryImplements asks the library itself: SetDefaults keeps only the
// names it has an implementation for (which also excludes what a FIPS
// build leaves out).
func libraryImplements(k AlgorithmKind, name string) bool {
	return slices.Contains(Algorithms{}.With(k, []string{name}).Offered().List(k), name)
}

func fromLibrary(l gossh.Algorithms) Algorithms {
	return Algorithms{KeyExchanges: l.KeyExchanges, Ciphers: l.Ciphers, MACs: l.MACs}
}

func unknownAlgorithm(k AlgorithmKind, name string) error {
	return fmt.Errorf("unknown %s algorithm %q (supported: %s)", k, name, strings.Join(KnownAlgorithms(k), ","))
}

// maxAlgorithmSpec bounds a setting's length; the longest real list is a
// few hundred bytes.
const maxAlgorithmSpec = 4096

// ApplyAlgorithmSpec applies an OpenSSH-style algorithm setting
// (sshd_config(5), Ciphers/KexAlgorithms/MACs) to base:
//
//	a,b   replaces the list
//	+a,b  appends what is not already there
//	-a,b  removes
//	^a,b  puts a,b first
//
// Names may be patterns with * and ?, matched against the algorithms the
// library implements. Every name and pattern must match one of them, and
// the result must not be empty.
func ApplyAlgorithmSpec(k AlgorithmKind, base []string, spec string) ([]string, error) {
	if len(spec) > maxAlgorithmSpec {
		return nil, fmt.Errorf("%s list longer than %d bytes", k, maxAlgorithmSpec)
	}
	op, rest := byte(0), strings.TrimSpace(spec)
	if rest != "" && strings.ContainsRune("+-^", rune(rest[0])) {
		op, rest = rest[0], rest[1:]
	}
	if strings.TrimSpace(rest) == "" {
		return nil, fmt.Errorf("empty %s list: name at least one algorithm", k)
	}
	names, err := expandAlgorithms(k, rest)
	if err != nil {
		return nil, err
	}
	var out []string
	switch op {
	case '+':
		out = slices.Clone(base)
		for _, n := range names {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	case '-':
		out = slices.DeleteFunc(slices.Clone(base), func(n string) bool { return slices.Contains(names, n) })
	case '^':
		out = slices.Concat(names, slices.DeleteFunc(slices.Clone(base), func(n string) bool { return slices.Contains(names, n) }))
	default:
		out = names
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s algorithm left: the list must not be empty", k)
	}
	return out, nil
}

// expandAlgorithms turns a comma list of names and patterns into the known
// algorithms they denote, without duplicates.
func expandAlgorithms(k AlgorithmKind, list string) ([]string, error) {
	known := KnownAlgorithms(k)
	var out []string
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, errors.New("empty name in " + k.String() + " list")
		}
		var matched []string
		for _, name := range known {
			if matchPattern(item, name) {
				matched = append(matched, name)
			}
		}
		if len(matched) == 0 {
			if strings.ContainsAny(item, "*?") {
				return nil, fmt.Errorf("pattern %q matches no supported %s algorithm (supported: %s)", item, k, strings.Join(known, ","))
			}
			return nil, unknownAlgorithm(k, item)
		}
		for _, n := range matched {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// matchPattern matches name against an OpenSSH pattern: * is any run of
// characters, ? any one character, everything else is literal. It
// backtracks only to the last star, so its time is linear in practice
// whatever the pattern.
func matchPattern(pattern, name string) bool {
	p, n := 0, 0
	star, starN := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, starN = p, n
			p++
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]):
			p, n = p+1, n+1
		case star >= 0:
			starN++
			p, n = star+1, starN
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
