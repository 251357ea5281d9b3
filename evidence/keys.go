package evidence

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/termsafe"
)

// Keys are what an examiner trusts: the sidecar host keys whose signatures
// vouch for a session, and keys revoked (known_hosts @revoked), whose
// signatures vouch for nothing even when the key is also trusted.
type Keys struct {
	Trusted []gossh.PublicKey
	Revoked []gossh.PublicKey
}

// maxKeyFile bounds a key file the verifier reads.
const maxKeyFile = 4 << 20

// ParseKeys reads keys from an OpenSSH public key (.pub) or authorized_keys
// file, or a known_hosts file, named name in errors. known_hosts @revoked
// lines become revoked keys. A @cert-authority line is refused: a session
// head is signed by a host key, never by a certificate, so trusting a CA
// would trust nothing useful and suggest otherwise. Anything this reader
// cannot honour exactly is refused, naming the line, rather than read as a
// plain trusted key: a line starting with '@' that is not a known_hosts
// line with a known marker (ssh.ParseAuthorizedKey would take "@revoked"
// for an option and trust the key), and every authorized_keys option,
// compared case-insensitively as sshd does ("CERT-AUTHORITY", "from=").
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
		if line[0] == '@' {
			if err := keys.addMarked(line, where); err != nil {
				return keys, err
			}
			continue
		}
		if k, _, opts, _, err := gossh.ParseAuthorizedKey(line); err == nil {
			if err := refuseOptions(opts, where); err != nil {
				return keys, err
			}
			keys.Trusted = append(keys.Trusted, k)
			continue
		}
		_, _, k, _, _, err := gossh.ParseKnownHosts(line)
		if err != nil {
			return keys, fmt.Errorf("%s: not a public key or known_hosts line", where)
		}
		keys.Trusted = append(keys.Trusted, k)
	}
	if len(keys.Trusted)+len(keys.Revoked) == 0 {
		return keys, fmt.Errorf("%s: no keys", name)
	}
	return keys, nil
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
		return fmt.Errorf("%s: @cert-authority lines are refused: session heads are signed by the sidecar's host key itself, not by a certificate; list the host key instead", where)
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

// refuseOptions refuses an authorized_keys line with options (names
// compared case-insensitively, as sshd does): none of them (from=,
// expiry-time=, restrict, ...) means anything to a signature over a
// session head, so the key is not half-honoured. cert-authority gets its
// own message. Fields that name no option are a known_hosts line's hosts.
func refuseOptions(opts []string, where string) error {
	var found string
	for _, o := range opts {
		optName, _, _ := strings.Cut(o, "=")
		optName = strings.ToLower(optName)
		switch {
		case optName == "cert-authority":
			return fmt.Errorf("%s: a cert-authority key is refused: session heads are signed by the sidecar's host key itself; give that key", where)
		case found == "" && slices.Contains(authorizedKeysOptions, optName):
			found = optName
		}
	}
	if found != "" {
		return fmt.Errorf("%s: key options (here %q) are refused: they cannot be honoured when checking a signature; give the bare key", where, found)
	}
	return nil
}

// Add appends other's keys to k.
func (k *Keys) Add(other Keys) {
	k.Trusted = append(k.Trusted, other.Trusted...)
	k.Revoked = append(k.Revoked, other.Revoked...)
}
