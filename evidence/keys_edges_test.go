package evidence_test

import (
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// TestParseKeysNamesTheLine: a refusal names the line it is on, counted
// from 1 as an editor shows it, past comments and blank lines.
func TestParseKeysNamesTheLine(t *testing.T) {
	good := gossh.MarshalAuthorizedKey(recordertest.Signer().PublicKey())
	data := append(append([]byte("# trusted hosts\n\n"), good...), "not a key\n"...)
	_, err := evidence.ParseKeys(data, "keys")
	if err == nil || !strings.Contains(err.Error(), "keys line 4:") {
		t.Errorf("ParseKeys = %v, want the refusal to name keys line 4", err)
	}
}
