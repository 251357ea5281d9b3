package testutil

import (
	"crypto/ed25519"
	"crypto/rand"

	gossh "golang.org/x/crypto/ssh"
)

// NewSigner returns a fresh ed25519 host key, as the sidecar generates one.
// Neither step can fail for ed25519 with crypto/rand (which never returns
// an error since Go 1.24), so a failure panics instead of taking a testing.TB.
func NewSigner() gossh.Signer {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	s, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		panic(err)
	}
	return s
}
