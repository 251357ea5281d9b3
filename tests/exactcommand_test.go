package tests

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestInvalidUTF8CommandRecordedExactly runs an exec whose command is not
// valid UTF-8: the open record must carry its exact bytes (command_b64,
// since JSON turns invalid bytes into U+FFFD), and they must equal the
// command in the typescript header, which escapes them.
func TestInvalidUTF8CommandRecordedExactly(t *testing.T) {
	h := newHarness(t)
	const command = "echo ok # \xff\xfe\xc3( \"q\" \\"
	res := rawExec(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "bytes-1"}, command)
	h.waitIdle(t)
	if !res.started || res.stdout != "ok\n" {
		t.Fatalf("got %+v", res)
	}
	dir := h.sessionDir("_unbound", "bytes-1")
	open := readIntegrityLog(t, dir)[0]
	if open.Type != vocab.TypeOpen {
		t.Fatalf("first record is %q", open.Type)
	}
	exact, err := base64.StdEncoding.DecodeString(open.Attrs["command_b64"])
	if err != nil || string(exact) != command {
		t.Errorf("open record command_b64 = %q (%v), want the command's exact bytes %q", exact, err, command)
	}

	ts, err := os.ReadFile(filepath.Join(dir, "pty", "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^Script started on [^\[]*\[COMMAND="((?:[^"\\]|\\.)*)"`).FindSubmatch(ts)
	if m == nil {
		t.Fatalf("typescript header has no COMMAND: %q", ts[:min(len(ts), 200)])
	}
	header, err := strconv.Unquote(`"` + string(m[1]) + `"`)
	if err != nil || header != string(exact) {
		t.Errorf("typescript header COMMAND %q (%v) and the record's %q differ", header, err, exact)
	}
	if rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{h.hostKey}}, evidence.Options{}); !rep.OK() {
		t.Errorf("record does not verify: %v", rep.Anomalies)
	}
}
