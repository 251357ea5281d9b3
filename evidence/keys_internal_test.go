package evidence

import (
	"bytes"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestParseKeysSizeBound: a key file of exactly the bound is read; one
// byte more is refused before any line is.
func TestParseKeysSizeBound(t *testing.T) {
	good := gossh.MarshalAuthorizedKey(testutil.NewSigner().PublicKey())
	pad := func(n int) []byte {
		b := append([]byte("#"), bytes.Repeat([]byte("x"), n-len(good)-2)...)
		return append(append(b, '\n'), good...)
	}
	if keys, err := ParseKeys(pad(maxKeyFile), "keys"); err != nil || len(keys.Trusted) != 1 {
		t.Errorf("a key file of exactly %d bytes: %d keys, %v", maxKeyFile, len(keys.Trusted), err)
	}
	if _, err := ParseKeys(pad(maxKeyFile+1), "keys"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a key file one byte past the bound: %v, want refused by size", err)
	}
}
