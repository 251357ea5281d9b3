package evidence

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/termsafe"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Keys are what an examiner trusts: the sidecar host keys whose signatures
// vouch for a session, the certificate authorities whose user
// certificates vouch for a session's own key (Authorities), and keys
// revoked (known_hosts @revoked), whose signatures vouch for nothing even
// when the key is also trusted, and whose certificates (a revoked CA, or a
// certified key revoked) neither.
type Keys struct {
	Trusted     []gossh.PublicKey
	Revoked     []gossh.PublicKey
	Authorities []Authority
}

// Authority is a certificate authority an examiner trusts for session
// keys (an allowed_signers cert-authority line): a session key's
// certificate vouches for a session when this CA signed it and it names
// one of Principals (OpenSSH patterns, as the line gives them).
type Authority struct {
	Key        gossh.PublicKey
	Principals []string
}

// maxKeyFile bounds a key file the verifier reads.
const maxKeyFile = 4 << 20

// ParseKeys reads keys from an OpenSSH public key (.pub) or authorized_keys
// file, a known_hosts file, or an allowed_signers file (ssh-keygen(1),
// "ALLOWED SIGNERS"), named name in errors. known_hosts @revoked lines
// become revoked keys; an allowed_signers line with cert-authority, or an
// authorized_keys cert-authority line (whose principal is then
// vocab.SignerPrincipal, the one every session certificate names), a
// trusted CA (Authority). A known_hosts @cert-authority line is refused: it
// trusts host certificates, and a session key's certificate is a user
// certificate. Anything this reader cannot honour exactly is refused,
// naming the line, rather than read as a plain trusted key: a line
// starting with '@' that is not a known_hosts line with a known marker
// (ssh.ParseAuthorizedKey would take "@revoked" for an option and trust
// the key), every other authorized_keys option, compared
// case-insensitively as sshd does ("CERT-AUTHORITY", "from="), an
// allowed_signers line whose namespaces leave out the session's, or one
// with a validity window (allowedSignersOptions), and a certificate given
// as a key (its CA is what to give).
func ParseKeys(data []byte, name string) (Keys, error) {
	var keys Keys
	if len(data) > maxKeyFile {
		return keys, fmt.Errorf("%s: larger than %d bytes", name, maxKeyFile)
	}
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		where := fmt.Sprintf("%s line %d", name, i+1)
		if err := keys.addLine(line, where); err != nil {
			return keys, err
		}
	}
	if len(keys.Trusted)+len(keys.Revoked)+len(keys.Authorities) == 0 {
		return keys, fmt.Errorf("%s: no keys", name)
	}
	return keys, nil
}

// addLine reads one line of a key file, not blank nor a comment, in
// whichever of the forms ParseKeys takes it is.
func (k *Keys) addLine(line []byte, where string) error {
	if line[0] == '@' {
		return k.addMarked(line, where)
	}
	// A bare key, an authorized_keys line, a known_hosts line, or an
	// allowed_signers line without options: ParseAuthorizedKey reads
	// the host patterns or principals of the last two as options.
	if key, _, opts, _, err := gossh.ParseAuthorizedKey(line); err == nil {
		ca, err := authorizedKeysCA(opts, where)
		if err != nil {
			return err
		}
		if ca {
			return k.addAuthority(key, []string{vocab.SignerPrincipal}, where)
		}
		return k.addTrusted(key, where)
	}
	if principals, rest := cutField(line); len(rest) > 0 {
		if key, _, opts, _, err := gossh.ParseAuthorizedKey(rest); err == nil && len(opts) > 0 {
			return k.addAllowedSigner(principals, key, opts, where)
		}
	}
	_, _, key, _, _, err := gossh.ParseKnownHosts(line)
	if err != nil {
		return fmt.Errorf("%s: not a public key, known_hosts or allowed_signers line", where)
	}
	return k.addTrusted(key, where)
}

// addTrusted trusts a plain key. A certificate is refused: trusting one
// certificate as a key would skip what makes it worth anything (its CA,
// its window, the open record naming it).
func (k *Keys) addTrusted(key gossh.PublicKey, where string) error {
	if _, ok := key.(*gossh.Certificate); ok {
		return fmt.Errorf("%s: a certificate is not a trusted key: give the certificate authority that issued it, as an allowed_signers line \"%s cert-authority <CA public key>\"", where, vocab.SignerPrincipal)
	}
	k.Trusted = append(k.Trusted, key)
	return nil
}

// addAuthority trusts a CA for principals.
func (k *Keys) addAuthority(key gossh.PublicKey, principals []string, where string) error {
	if _, ok := key.(*gossh.Certificate); ok {
		return fmt.Errorf("%s: a certificate authority must be a plain key, not a certificate", where)
	}
	k.Authorities = append(k.Authorities, Authority{Key: key, Principals: principals})
	return nil
}

// allowedSignersOptions are the options ssh-keygen(1) knows in an
// allowed_signers line. namespaces is honoured (it must let the
// session's signatures through), cert-authority makes the line a CA;
// valid-after and valid-before are refused: ssh-keygen holds them to the
// verification time, and a window of the line beside the certificate's
// own would be a second, easily mistaken, clock.
var allowedSignersOptions = []string{"cert-authority", "namespaces", "valid-after", "valid-before"}

// sessionNamespaces are the SSHSIG namespaces a session's key signs in:
// its heads and its manifest. An allowed_signers line must allow both.
var sessionNamespaces = []string{integrity.HeadNamespace, integrity.ManifestNamespace}

// addAllowedSigner reads an allowed_signers line with options:
// "principals options key".
func (k *Keys) addAllowedSigner(principalsField []byte, key gossh.PublicKey, opts []string, where string) error {
	principals := strings.Split(unquote(string(principalsField)), ",")
	ca := false
	for _, o := range opts {
		optName, value, _ := strings.Cut(o, "=")
		switch optName = strings.ToLower(optName); optName {
		case "cert-authority":
			ca = true
		case "namespaces":
			allowed := strings.Split(unquote(value), ",")
			var missing []string
			for _, ns := range sessionNamespaces {
				if !matchPatternList(ns, allowed) {
					missing = append(missing, ns)
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("%s: namespaces=%.64q leaves out %s, which a session's signatures are made in; add it or drop the option", where, unquote(value), strings.Join(missing, " and "))
			}
		case "valid-after", "valid-before":
			return fmt.Errorf("%s: the allowed_signers option %s is refused: a session key's certificate carries its own validity window, which verify checks at the session's start; drop the option", where, optName)
		default:
			return fmt.Errorf("%s: unknown allowed_signers option %.32q (ssh-keygen knows %s)", where, optName, strings.Join(allowedSignersOptions, ", "))
		}
	}
	if ca {
		return k.addAuthority(key, principals, where)
	}
	return k.addTrusted(key, where)
}

// cutField splits off a line's first field, which double quotes may
// hold whitespace in (as ssh-keygen reads an allowed_signers line's
// principals), and returns the rest with its leading blanks trimmed.
func cutField(line []byte) (field, rest []byte) {
	inQuote := false
	for i, b := range line {
		switch {
		case b == '"':
			inQuote = !inQuote
		case !inQuote && (b == ' ' || b == '\t'):
			return line[:i], bytes.TrimLeft(line[i:], " \t")
		}
	}
	return line, nil
}

// unquote strips the double quotes around an option's value or a field.
func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}

// matchPatternList is OpenSSH's match_pattern_list as allowed_signers
// uses it for principals and namespaces: s matches when one pattern of
// list matches it and no negated one ("!pattern") does.
func matchPatternList(s string, list []string) bool {
	matched := false
	for _, p := range list {
		negated := strings.HasPrefix(p, "!")
		if matchPattern(s, strings.TrimPrefix(p, "!")) {
			if negated {
				return false
			}
			matched = true
		}
	}
	return matched
}

// matchPattern is OpenSSH's match_pattern: '*' matches any run of
// characters, '?' any one.
func matchPattern(s, p string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			p = strings.TrimLeft(p, "*")
			if p == "" {
				return true
			}
			for i := range len(s) + 1 {
				if matchPattern(s[i:], p) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
		}
		s, p = s[1:], p[1:]
	}
	return s == ""
}

// addMarked reads a known_hosts line with a marker: "@revoked <hosts>
// <key>" revokes the key; anything else is refused with where it is.
func (k *Keys) addMarked(line []byte, where string) error {
	marker, _, key, _, _, err := gossh.ParseKnownHosts(line)
	switch {
	case err != nil:
		return fmt.Errorf("%s: a line starting with '@' must be a known_hosts marker line, \"@revoked <host patterns> <key>\" (is the host pattern missing?)", where)
	case marker == "revoked":
		k.Revoked = append(k.Revoked, key)
		return nil
	case marker == "cert-authority":
		return fmt.Errorf("%s: @cert-authority lines are refused: they trust host certificates, and a session key's certificate is a user certificate; give its CA as an allowed_signers line \"%s cert-authority <CA public key>\", or the sidecar's host key", where, vocab.SignerPrincipal)
	}
	return fmt.Errorf("%s: unknown known_hosts marker @%s", where, termsafe.Escape(marker))
}

// authorizedKeysOptions are the option names sshd(8) knows in
// authorized_keys. ssh.ParseAuthorizedKey also takes a known_hosts line's
// host patterns ("sidecar ssh-ed25519 ...") for options; these names tell
// the two apart.
var authorizedKeysOptions = []string{
	"agent-forwarding", "cert-authority", "command", "environment", "expiry-time",
	"from", "no-agent-forwarding", "no-port-forwarding", "no-pty", "no-touch-required",
	"no-user-rc", "no-x11-forwarding", "permitlisten", "permitopen", "port-forwarding",
	"principals", "pty", "restrict", "touch-required", "tunnel", "user-rc",
	"verify-required", "x11-forwarding",
}

// authorizedKeysCA reads an authorized_keys line's options (names
// compared case-insensitively, as sshd does): cert-authority alone makes
// the key a CA (ca); every other option (from=, expiry-time=, restrict,
// ...) means nothing to a signature over a session head, so the key is
// not half-honoured and the line is refused. Fields that name no option
// are a known_hosts line's hosts or an allowed_signers line's principals.
func authorizedKeysCA(opts []string, where string) (ca bool, err error) {
	for _, o := range opts {
		optName, _, _ := strings.Cut(o, "=")
		optName = strings.ToLower(optName)
		switch {
		case optName == "cert-authority":
			ca = true
		case slices.Contains(authorizedKeysOptions, optName):
			return false, fmt.Errorf("%s: key options (here %q) are refused: they cannot be honoured when checking a signature; give the bare key", where, optName)
		}
	}
	return ca, nil
}

// Add appends other's keys to k.
func (k *Keys) Add(other Keys) {
	k.Trusted = append(k.Trusted, other.Trusted...)
	k.Revoked = append(k.Revoked, other.Revoked...)
	k.Authorities = append(k.Authorities, other.Authorities...)
}
