package examine

import (
	"bytes"
	"fmt"
	"slices"

	gossh "golang.org/x/crypto/ssh"
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
// lines become revoked keys. A @cert-authority line (or an authorized_keys
// cert-authority option) is refused: a session head is signed by a host
// key, never by a certificate, so trusting a CA would trust nothing useful
// and suggest otherwise.
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
		if k, _, opts, _, err := gossh.ParseAuthorizedKey(line); err == nil {
			if slices.ContainsFunc(opts, func(o string) bool { return o == "cert-authority" }) {
				return keys, fmt.Errorf("%s line %d: a cert-authority key is refused: session heads are signed by the sidecar's host key itself; give that key", name, i+1)
			}
			keys.Trusted = append(keys.Trusted, k)
			continue
		}
		marker, _, k, _, _, err := gossh.ParseKnownHosts(line)
		switch {
		case err != nil:
			return keys, fmt.Errorf("%s line %d: not a public key or known_hosts line", name, i+1)
		case marker == "revoked":
			keys.Revoked = append(keys.Revoked, k)
		case marker == "cert-authority":
			return keys, fmt.Errorf("%s line %d: @cert-authority lines are refused: session heads are signed by the sidecar's host key itself, not by a certificate; list the host key instead", name, i+1)
		case marker != "":
			return keys, fmt.Errorf("%s line %d: unknown known_hosts marker @%s", name, i+1, marker)
		default:
			keys.Trusted = append(keys.Trusted, k)
		}
	}
	if len(keys.Trusted)+len(keys.Revoked) == 0 {
		return keys, fmt.Errorf("%s: no keys", name)
	}
	return keys, nil
}

// Add appends other's keys to k.
func (k *Keys) Add(other Keys) {
	k.Trusted = append(k.Trusted, other.Trusted...)
	k.Revoked = append(k.Revoked, other.Revoked...)
}
