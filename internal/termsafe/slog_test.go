package termsafe

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
)

// TestJSONWriterEscapesTerminalControls: a slog JSON record naming a path
// with DEL, a C1 CSI and bidi controls reaches the writer with none of
// them raw, stays valid JSON and decodes to the same path.
func TestJSONWriterEscapesTerminalControls(t *testing.T) {
	path := "a\x1b[2Jb\u009b31mc\x7fd\u202egnp.exe\u2066x\u2069é✓"
	var out bytes.Buffer
	slog.New(slog.NewJSONHandler(NewJSONWriter(&out), nil)).Warn("recovery failed", "path", path)
	line := out.Bytes()
	for _, raw := range []string{"\x7f", "\u009b", "\u202e", "\u2066", "\u2069"} {
		if bytes.Contains(line, []byte(raw)) {
			t.Errorf("raw %q in the JSON log: %q", raw, line)
		}
	}
	for _, esc := range []string{`\u007f`, `\u009b`, `\u202e`, "é✓"} {
		if !bytes.Contains(line, []byte(esc)) {
			t.Errorf("%q missing from %s", esc, line)
		}
	}
	var rec struct{ Path string }
	if err := json.Unmarshal(line, &rec); err != nil || rec.Path != path {
		t.Errorf("decoded %q, %v; want %q", rec.Path, err, path)
	}
}
