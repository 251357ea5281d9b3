package tests

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestVerifyJSONEscapesControls: a session folder named with a C1 CSI
// (U+009B) and DEL. verify --json must not print them raw (encoding/json
// escapes only C0 controls): they leave as \u escapes, and the JSON still
// decodes to the folder's real name.
func TestVerifyJSONEscapesControls(t *testing.T) {
	bin := buildCommand(t)
	signer := newTestSigner(t)
	dir := recordFinalized(t, t.TempDir(), "run-j", "sess-j", signer)
	hostile := filepath.Join(filepath.Dir(dir), "s\u009b2J\x7f")
	if err := os.Rename(dir, hostile); err != nil {
		t.Fatal(err)
	}
	out, code := runCommand(t, bin, "verify", "--json", "--key", writePubKey(t, signer.PublicKey()), hostile)
	// The folder's name differs from the signed session id: a note, not a
	// failure.
	if code != 0 {
		t.Errorf("verify --json of a session in a renamed folder: exit %d, want 0\n%s", code, out)
	}
	for _, raw := range [][]byte{[]byte("\u009b"), {0x7f}} {
		if bytes.Contains(out, raw) {
			t.Errorf("verify --json printed the raw bytes %x:\n%q", raw, out)
		}
	}
	if !bytes.Contains(out, []byte(`s\u009b2J\u007f`)) {
		t.Errorf("verify --json does not name the folder with \\u escapes:\n%s", out)
	}
	var doc struct{ Sessions []struct{ Dir string } }
	if err := json.Unmarshal(out, &doc); err != nil || len(doc.Sessions) != 1 || doc.Sessions[0].Dir != hostile {
		t.Errorf("the JSON decodes to %+v (%v), want one session in %q", doc, err, hostile)
	}
}
