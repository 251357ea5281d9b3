package tests

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	gossh "golang.org/x/crypto/ssh"
)

// readmeVerifyExamples returns the command lines of the README block that
// follows the verify-examples marker.
func readmeVerifyExamples(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/RECORD.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "<!-- verify-examples: tests/verify_readme_test.go -->\n```sh\n")
	if !ok {
		t.Fatal("docs/RECORD.md has no verify-examples block")
	}
	block, _, _ := strings.Cut(after, "```")
	return strings.Split(strings.TrimSpace(block), "\n")
}

// TestReadmeVerifyExamplesRun prepares what the README's verify examples
// assume (the host key, a capture root as serve writes it, a harvest with
// the tool server's tee) and runs every line as written with sh, the
// built binary on PATH: each must exit 0. The JSON line's copy must
// verify as the session its record names, with the folder name a note.
func TestReadmeVerifyExamplesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped in -short mode")
	}
	bin := buildCommand(t)
	signer := newTestSigner(t)
	work := t.TempDir()
	writeFile(t, filepath.Join(work, "ssh_host_ed25519_key.pub"), gossh.MarshalAuthorizedKey(signer.PublicKey()))
	recordFinalized(t, filepath.Join(work, "captures"), "run-1", "sess-1", signer)
	recordFinalized(t, filepath.Join(work, "captures"), "run-1", "sess-2", signer)
	recordFinalized(t, filepath.Join(work, "scratch"), "run-1", "sess-1", signer)
	kali := filepath.Join(work, "runs", "run-1", "kali-side")
	if err := os.MkdirAll(kali, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(work, "scratch", "run-1", "sess-1"), filepath.Join(kali, "sess-1")); err != nil {
		t.Fatal(err)
	}
	// recordFinalized's output, as the tool server's client received it.
	tee := fmt.Sprintf(`{"ts": 1767225600000, "dir": "out", "b64": %q}`+"\n", base64.StdEncoding.EncodeToString([]byte("hello from the session\r\n")))
	writeFile(t, filepath.Join(work, "runs", "run-1", "mcp-side", "sessions", "sess-1.jsonl"), []byte(tee))

	lines := readmeVerifyExamples(t)
	if len(lines) < 5 {
		t.Fatalf("README verify examples: %q", lines)
	}
	env := append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var last []byte
	for _, line := range lines {
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", line, err, out)
		}
		last = out
	}
	var doc struct {
		OK       bool
		Sessions []evidence.Report
	}
	if err := json.Unmarshal(last, &doc); err != nil || !doc.OK || len(doc.Sessions) != 1 {
		t.Fatalf("the last example's JSON: %v\n%s", err, last)
	}
	if s := doc.Sessions[0]; s.SessionID != "sess-1" || s.RunID != "run-1" || len(s.Notes) != 2 {
		t.Errorf("the renamed copy: session %q run %q notes %v; want sess-1 of run-1 with both folder-name notes", s.SessionID, s.RunID, s.Notes)
	}
}
