package sessionkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// MaxProvision bounds the keys one provisioning makes: a pool is a few
// days of sessions, refilled as it runs low (readiness says so).
const MaxProvision = 100000

// Provisioning is what an operator asks of Provision.
type Provisioning struct {
	// CA signs the certificates. It stays where the operator keeps it:
	// Provision runs off the sidecar.
	CA gossh.Signer
	// Count is how many keys to make, 1 to MaxProvision.
	Count int
	// FirstSerial is the first certificate's serial; the others follow
	// it. Serials must never repeat across a lab's pools: the verifier
	// refuses a serial two sessions share.
	FirstSerial uint64
	// ValidAfter and ValidBefore are every certificate's window: a
	// session whose start lies outside it does not verify.
	ValidAfter, ValidBefore time.Time
}

// DefaultFirstSerial is a first serial that successive provisionings do
// not repeat without being told one: the Unix time in seconds, shifted
// past the MaxProvision serials of one provisioning, so runs a second or
// more apart get ranges of their own.
func DefaultFirstSerial(now time.Time) uint64 { return uint64(now.Unix()) << 17 }

// Provision makes p.Count key pairs and their certificates in
// dir/pool/ (dir is made if needed, 0700; no file is replaced), and
// returns the serials made. Each certificate is a user certificate for
// the principal vocab.SignerPrincipal, with key id
// "aptl-kali-capture-session-<serial>", no options and no extensions: it
// certifies a key for signing a session's record and nothing else.
func Provision(dir string, p Provisioning) (first, last uint64, err error) {
	if p.Count < 1 || p.Count > MaxProvision {
		return 0, 0, fmt.Errorf("sessionkey: count %d: must be 1 to %d", p.Count, MaxProvision)
	}
	if p.FirstSerial > ^uint64(0)-uint64(p.Count) {
		return 0, 0, fmt.Errorf("sessionkey: first serial %d: %d serials from it do not fit in 64 bits", p.FirstSerial, p.Count)
	}
	if !p.ValidBefore.After(p.ValidAfter) {
		return 0, 0, errors.New("sessionkey: the certificates' window ends before it starts")
	}
	if _, ok := p.CA.PublicKey().(*gossh.Certificate); ok {
		return 0, 0, errors.New("sessionkey: the CA is a certificate; give the CA's own key")
	}
	pool := filepath.Join(dir, PoolDir)
	if err := os.MkdirAll(pool, 0o700); err != nil {
		return 0, 0, fmt.Errorf("sessionkey: %w", err)
	}
	for i := range p.Count {
		serial := p.FirstSerial + uint64(i)
		if err := provisionOne(pool, p, serial); err != nil {
			return 0, 0, fmt.Errorf("sessionkey: key %d of %d (serial %d): %w", i+1, p.Count, serial, err)
		}
	}
	return p.FirstSerial, p.FirstSerial + uint64(p.Count) - 1, nil
}

func provisionOne(pool string, p Provisioning, serial uint64) error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	defer clear(priv)
	key, err := gossh.NewPublicKey(pub)
	if err != nil {
		return err
	}
	cert := &gossh.Certificate{
		Key:             key,
		Serial:          serial,
		CertType:        gossh.UserCert,
		KeyId:           KeyID(serial),
		ValidPrincipals: []string{vocab.SignerPrincipal},
		ValidAfter:      uint64(p.ValidAfter.Unix()),
		ValidBefore:     uint64(p.ValidBefore.Unix()),
	}
	if err := cert.SignCert(rand.Reader, p.CA); err != nil {
		return err
	}
	block, err := gossh.MarshalPrivateKey(priv, KeyID(serial))
	if err != nil {
		return err
	}
	encoded := pem.EncodeToMemory(block)
	defer clear(encoded)
	defer clear(block.Bytes)
	// The certificate first: a key file is taken only with its
	// certificate beside it.
	if err := writeNew(filepath.Join(pool, certName(serial)), gossh.MarshalAuthorizedKey(cert)); err != nil {
		return err
	}
	return writeNew(filepath.Join(pool, keyName(serial)), encoded)
}

// KeyID is the key id of serial's certificate.
func KeyID(serial uint64) string {
	return "aptl-kali-capture-session-" + strconv.FormatUint(serial, 10)
}

// writeNew writes a new file, 0600, never over one, synced.
func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// AllowedSigners is the allowed_signers(5) line an examiner verifies
// session signatures with, for `ssh-keygen -Y verify -f` and `verify
// --key`: the CA, for the sessions' principal and the record's two
// namespaces.
func AllowedSigners(ca gossh.PublicKey) string {
	return vocab.SignerPrincipal + " cert-authority,namespaces=\"" + strings.Join(Namespaces, ",") + "\" " +
		strings.TrimSpace(string(gossh.MarshalAuthorizedKey(ca))) + "\n"
}

// Namespaces are the SSHSIG namespaces a session key signs in: the heads
// of the chain and the manifest.
var Namespaces = []string{integrity.HeadNamespace, integrity.ManifestNamespace}
