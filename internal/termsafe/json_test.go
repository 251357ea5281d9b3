package termsafe_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/termsafe"
)

// TestJSONWriterEscapesControls: DEL, C1 controls and bidi controls leave
// as \u escapes, the JSON decodes to the same value, and printable text
// (ASCII, accents, CJK, emoji) passes unchanged, even split across writes.
func TestJSONWriterEscapesControls(t *testing.T) {
	in := "s\u009b2J\x7f \u202egnp \u2066x\u2069 naïve 漢字 🙂 \x1b"
	var out bytes.Buffer
	if err := json.NewEncoder(termsafe.NewJSONWriter(&out)).Encode(map[string]string{"dir": in}); err != nil {
		t.Fatal(err)
	}
	want := `{"dir":"s\u009b2J\u007f \u202egnp \u2066x\u2069 naïve 漢字 🙂 \u001b"}` + "\n"
	if out.String() != want {
		t.Errorf("got  %s\nwant %s", out.String(), want)
	}
	var back map[string]string
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back["dir"] != in {
		t.Errorf("decodes to %q (%v), want %q", back["dir"], err, in)
	}
	// Byte by byte: every multi-byte sequence is split across writes.
	var split bytes.Buffer
	w := termsafe.NewJSONWriter(&split)
	raw, _ := json.Marshal(map[string]string{"dir": in})
	for i := range raw {
		if _, err := w.Write(raw[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if split.String()+"\n" != want {
		t.Errorf("written byte by byte: %s", split.String())
	}
}
