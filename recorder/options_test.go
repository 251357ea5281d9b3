package recorder

import (
	"sync"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

var (
	testSignerOnce sync.Once
	testSigner     gossh.Signer
)

// testOptions are the recorder settings of the tests: a fresh ed25519 key,
// the default durability, no size cap.
func testOptions() Options {
	testSignerOnce.Do(func() {
		testSigner = testutil.NewSigner()
	})
	return Options{Signer: testSigner}
}
