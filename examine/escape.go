package examine

import (
	"encoding/json"
	"io"

	"github.com/aptl/aptl-kali-capture/internal/termsafe"
)

// NewJSONEncoder is the encoder of every JSON the examiner prints (verify
// --json, the asciicast export): encoding/json escapes only C0 controls,
// so its output goes through termsafe.NewJSONWriter, which escapes DEL,
// the C1 and bidi controls as \u escapes too (the same value, decoded).
// Text output goes through termsafe.Escape.
func NewJSONEncoder(w io.Writer) *json.Encoder {
	return json.NewEncoder(termsafe.NewJSONWriter(w))
}
