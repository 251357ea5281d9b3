package integrity

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"encoding/pem"
	"errors"
	"fmt"

	gossh "golang.org/x/crypto/ssh"
)

// SSHSIG signatures (OpenSSH PROTOCOL.sshsig), so that an examiner can check
// a signed head with stock tooling:
//
//	ssh-keygen -Y verify -f allowed_signers -I aptl-kali-capture -n aptl-kali-capture-head -s head.sig < head.txt
//
// The blob is: "SSHSIG" || uint32 version || string publickey || string
// namespace || string reserved || string hash_algorithm || string signature,
// where the signature covers "SSHSIG" || string namespace || string reserved
// || string hash_algorithm || string H(message).

// HeadNamespace is the SSHSIG namespace of signed heads: a signature made for
// anything else (a git commit, a file) never verifies as a head.
const HeadNamespace = "aptl-kali-capture-head"

// ManifestNamespace is the SSHSIG namespace of a session's signed manifest
// (vocab.ManifestFile): a head's signature never verifies as a manifest's,
// nor a manifest's as a head's.
const ManifestNamespace = "aptl-kali-capture-manifest"

const (
	sshsigMagic   = "SSHSIG"
	sshsigVersion = 1
	sshsigHash    = "sha512"
	sshsigPEMType = "SSH SIGNATURE"
)

type sshsigBlob struct {
	Version   uint32
	PublicKey []byte
	Namespace string
	Reserved  string
	HashAlg   string
	Signature []byte
}

type sshsigSigned struct {
	Namespace string
	Reserved  string
	HashAlg   string
	Hash      []byte
}

func signedData(namespace string, message []byte) []byte {
	h := sha512.Sum512(message)
	return append([]byte(sshsigMagic), gossh.Marshal(sshsigSigned{namespace, "", sshsigHash, h[:]})...)
}

// SignSSHSIG returns message's armored SSHSIG signature in namespace.
func SignSSHSIG(signer gossh.Signer, namespace string, message []byte) (string, error) {
	sig, err := signer.Sign(rand.Reader, signedData(namespace, message))
	if err != nil {
		return "", fmt.Errorf("sshsig: sign: %w", err)
	}
	blob := append([]byte(sshsigMagic), gossh.Marshal(sshsigBlob{
		Version:   sshsigVersion,
		PublicKey: signer.PublicKey().Marshal(),
		Namespace: namespace,
		HashAlg:   sshsigHash,
		Signature: gossh.Marshal(sig),
	})...)
	return string(pem.EncodeToMemory(&pem.Block{Type: sshsigPEMType, Bytes: blob})), nil
}

var errBadSignature = errors.New("signature does not verify")

// VerifySSHSIG checks an armored SSHSIG signature of message in namespace
// and returns the key that made it. The caller decides whether that key is
// trusted.
func VerifySSHSIG(armored string, namespace string, message []byte) (gossh.PublicKey, error) {
	block, _ := pem.Decode([]byte(armored))
	if block == nil || block.Type != sshsigPEMType {
		return nil, errors.New("sshsig: not an armored SSH signature")
	}
	raw, ok := bytes.CutPrefix(block.Bytes, []byte(sshsigMagic))
	if !ok {
		return nil, errors.New("sshsig: bad magic")
	}
	var blob sshsigBlob
	if err := gossh.Unmarshal(raw, &blob); err != nil {
		return nil, fmt.Errorf("sshsig: %w", err)
	}
	switch {
	case blob.Version != sshsigVersion:
		return nil, fmt.Errorf("sshsig: version %d", blob.Version)
	case blob.Namespace != namespace:
		return nil, fmt.Errorf("sshsig: namespace %q, want %q", blob.Namespace, namespace)
	case blob.HashAlg != sshsigHash:
		return nil, fmt.Errorf("sshsig: hash %q", blob.HashAlg)
	}
	pub, err := gossh.ParsePublicKey(blob.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("sshsig: public key: %w", err)
	}
	var sig gossh.Signature
	if err := gossh.Unmarshal(blob.Signature, &sig); err != nil {
		return nil, fmt.Errorf("sshsig: signature: %w", err)
	}
	if err := pub.Verify(signedData(namespace, message), &sig); err != nil {
		return nil, fmt.Errorf("sshsig: %w", errBadSignature)
	}
	return pub, nil
}
