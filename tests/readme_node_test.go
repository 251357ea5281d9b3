package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestReadmeNodeSnippet runs README.md's node ssh2 block as a newcomer
// would: `node connect.js` in the folder serve runs in on its embedded
// default (only the port differs, so parallel runs cannot collide). The
// shell runs the command, the client's EOF ends it, the connection closes
// without a timeout, and the session is recorded under the ids it sent.
func TestReadmeNodeSnippet(t *testing.T) {
	node, modules := nodeClient(t)
	bin := buildForLiveTest(t)
	block := testutil.ReadmeCodeBlock(t, "../README.md", "## Connecting", "js")
	if !strings.Contains(block, "port: 2222") {
		t.Fatalf("README.md's node ssh2 block does not connect to port 2222:\n%s", block)
	}
	work := t.TempDir()
	srv, sshArgs, logs := startServe(t, bin, work)
	defer srv.Process.Kill()
	port := sshArgs[1] // ssh -p PORT ...
	script := strings.Replace(block, "port: 2222", "port: "+port, 1)
	if err := os.WriteFile(filepath.Join(work, "connect.js"), []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "connect.js")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello from ssh2") {
		t.Fatalf("node connect.js: %v\n%s\nserver logs:\n%s", err, out, logs.String())
	}
	ts, err := os.ReadFile(filepath.Join(work, "aptl-dev", "captures", "demo", "node-1", "pty", "typescript"))
	if err != nil || !strings.Contains(string(ts), "hello from ssh2") {
		t.Errorf("the session's record: %v\n%s", err, ts)
	}
}
