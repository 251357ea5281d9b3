package cliconfig

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestNewLoggerEscapesControlsInBothFormats: a hostile folder name logged
// by serve or the agent reaches the log with no raw DEL, C1 or bidi
// control, in JSON (still valid, same value) as in text.
func TestNewLoggerEscapesControlsInBothFormats(t *testing.T) {
	name := "a\x1b[2Jb\xc2\x9b31mc\x7fd\u202e"
	for _, format := range []string{"json", "text"} {
		var out bytes.Buffer
		NewLogger(&out, format, slog.LevelInfo).Warn("recovery failed", "dir", name)
		for _, raw := range []string{"\x1b", "\xc2\x9b", "\x7f", "\u202e"} {
			if strings.Contains(out.String(), raw) {
				t.Errorf("%s log holds raw %q: %q", format, raw, out.String())
			}
		}
		if format == "json" {
			var rec struct{ Dir string }
			if err := json.Unmarshal(out.Bytes(), &rec); err != nil || rec.Dir != name {
				t.Errorf("json log decodes to %q, %v; want %q", rec.Dir, err, name)
			}
		}
	}
}
