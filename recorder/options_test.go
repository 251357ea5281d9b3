package recorder

import (
	"crypto/ed25519"
	"crypto/rand"
	"sync"

	gossh "golang.org/x/crypto/ssh"
)

var (
	testSignerOnce sync.Once
	testSigner     gossh.Signer
)

// testOptions are the recorder settings of the tests: a fresh ed25519 key,
// the default durability, no size cap.
func testOptions() Options {
	testSignerOnce.Do(func() {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		if testSigner, err = gossh.NewSignerFromKey(priv); err != nil {
			panic(err)
		}
	})
	return Options{Signer: testSigner}
}
