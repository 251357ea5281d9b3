package tests

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// evilID holds what a forged record may carry to rewrite an examiner's
// terminal: ESC and CSI sequences (erase the line), CR, BEL, the C1 CSI
// (U+009B) and a bidi override. evilText, for file names, adds a raw C1
// CSI byte (not UTF-8, so a record's JSON cannot hold it).
const (
	evilID   = "s\x1b[2K\rOK \x1b]0;t\a\u009b31m\u202e"
	evilText = evilID + "\x9b"
)

// evilAttrs make the open record carry evilID as its run and session.
var evilAttrs = map[string]string{"run_id": evilID, "session_id": evilID}

// TestVerifyEscapesTerminalOutput verifies forged, unsigned sessions whose
// ids (in the record and in the directory names) hold terminal controls:
// verify's text output must carry none of them raw, and still say FAIL.
func TestVerifyEscapesTerminalOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped in -short mode")
	}
	bin := buildCommand(t)
	pub := writePubKey(t, newTestSigner(t).PublicKey())
	forger := newTestSigner(t) // not the trusted key: the record is forged

	root := t.TempDir()
	dir := recordertest.Unfinalized(t, root, evilText, evilText, forger, evilAttrs, nil)
	out, code := runCommand(t, bin, "verify", "--key", pub, dir)
	checkTerminalSafe(t, "verify SESSION_DIR", out, code)

	runDir := filepath.Join(t.TempDir(), evilText)
	// The session lies in kali-side/<id>; its record names run "kali-side".
	recordertest.Unfinalized(t, runDir, "kali-side", evilText, forger, evilAttrs, nil)
	writeFile(t, filepath.Join(runDir, "kali-side", "x"+evilText), []byte("not a session"))
	writeFile(t, filepath.Join(runDir, "mcp-side", "sessions", evilText+"2.jsonl"), []byte("{}\n"))
	out, code = runCommand(t, bin, "verify", "--key", pub, "--run-dir", runDir)
	checkTerminalSafe(t, "verify --run-dir", out, code)
}

// checkTerminalSafe fails when out holds a byte a terminal would act on
// (C0 controls but newline, DEL, C1 controls, invalid UTF-8, bidi
// controls) or does not report the failure.
func checkTerminalSafe(t *testing.T, what string, out []byte, code int) {
	t.Helper()
	if code != 1 || !bytes.HasPrefix(out, []byte("FAIL")) {
		t.Errorf("%s: exit %d, want 1 and a FAIL line first:\n%q", what, code, out)
	}
	for i := 0; i < len(out); {
		r, size := utf8.DecodeRune(out[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			t.Errorf("%s: raw byte 0x%02x (not UTF-8) at offset %d:\n%q", what, out[i], i, out)
			return
		case (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) || (r >= 0x202a && r <= 0x202e):
			t.Errorf("%s: control character %U at offset %d reaches the terminal:\n%q", what, r, i, out)
			return
		}
		i += size
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "OK") {
			t.Errorf("%s: a line starts with OK:\n%q", what, out)
		}
	}
}
