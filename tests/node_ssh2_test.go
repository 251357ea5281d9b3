package tests

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
)

// nodeResult is what tests/node/connect.js prints.
type nodeResult struct {
	OK         bool    `json:"ok"`
	Output     *string `json:"output"`
	Status     *int    `json:"status"`
	ShellExit  *int    `json:"shellExit"`
	Error      *string `json:"error"`
	Negotiated *struct {
		Kex string `json:"kex"`
		Key string `json:"serverHostKey"`
		CS  struct {
			Cipher string `json:"cipher"`
			MAC    string `json:"mac"`
		} `json:"cs"`
	} `json:"negotiated"`
}

// ssh2Modules finds a node_modules folder holding ssh2: the one named by
// APTL_SSH2_NODE_MODULES, else tests/node/node_modules (npm install there).
func ssh2Modules(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("APTL_SSH2_NODE_MODULES")
	if dir == "" {
		dir = filepath.Join("node", "node_modules")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(abs, "ssh2", "package.json")); err != nil {
		skipClient(t, "node ssh2", fmt.Sprintf("node ssh2 library not found in %s: set APTL_SSH2_NODE_MODULES to a node_modules folder holding ssh2 1.17, or run `npm install` in tests/node", abs))
	}
	return abs
}

// nodeClient returns the node binary and the ssh2 modules folder, or skips.
func nodeClient(t testing.TB) (node, modules string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		skipClient(t, "node ssh2", "node (Node.js 20) not installed")
	}
	return node, ssh2Modules(t)
}

// runNodeScript runs tests/node/<script> with opts as its JSON argument
// file, bounded by timeout, and returns what it printed.
func runNodeScript(tb testing.TB, script string, opts map[string]any, timeout time.Duration) (stdout, stderr []byte, err error) {
	node, modules := nodeClient(tb)
	path, err := filepath.Abs(filepath.Join("node", script))
	if err != nil {
		return nil, nil, err
	}
	optsFile := filepath.Join(tb.TempDir(), strings.TrimSuffix(script, ".js")+".json")
	data, _ := json.Marshal(opts)
	if err := os.WriteFile(optsFile, data, 0o600); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, path, optsFile)
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.Bytes(), errOut.Bytes(), err
}

// runNodeClient runs tests/node/connect.js with opts and returns its result.
func runNodeClient(t *testing.T, opts map[string]any) nodeResult {
	t.Helper()
	stdout, stderr, runErr := runNodeScript(t, "connect.js", opts, 60*time.Second)
	var res nodeResult
	if err := json.Unmarshal(stdout, &res); err != nil {
		t.Fatalf("connect.js printed no JSON result (%v, run: %v):\nstdout: %s\nstderr: %s", err, runErr, stdout, stderr)
	}
	t.Logf("connect.js: %s", bytes.TrimSpace(stdout))
	return res
}

// TestNodeSSH2Client: the tool servers' client, node ssh2 1.17 with its
// default algorithms, logs in to the default server, runs a delimited
// command in a PTY shell with its session id, and the session is recorded.
// What it negotiates must come from the hardened lists.
func TestNodeSSH2Client(t *testing.T) {
	nodeClient(t)
	h := newHarness(t)
	host, port, _ := net.SplitHostPort(h.addr)
	portN, _ := strconv.Atoi(port)
	res := runNodeClient(t, map[string]any{
		"host": host, "port": portN, "username": h.user, "privateKeyPath": h.clientKey,
		"hostKey": base64.StdEncoding.EncodeToString(h.hostKey.Marshal()),
		"env":     map[string]string{"APTL_SESSION_ID": "node-1", "APTL_RUN_ID": "node"},
		"command": "printf 'node-%s\\n' ok",
	})
	if !res.OK || res.Output == nil || *res.Output != "node-ok\r\n" || res.Status == nil || *res.Status != 0 {
		t.Fatalf("node ssh2 session failed: %+v (server log:\n%s)", res, h.logs.String())
	}
	def := broker.DefaultAlgorithms()
	n := res.Negotiated
	if n == nil || !slices.Contains(def.KeyExchanges, n.Kex) || n.Key != "ssh-ed25519" || !slices.Contains(def.Ciphers, n.CS.Cipher) {
		t.Errorf("negotiated %+v, outside the default lists %+v", n, def)
	} else if n.CS.MAC != "" && !slices.Contains(def.MACs, n.CS.MAC) {
		t.Errorf("negotiated MAC %q, outside %q", n.CS.MAC, def.MACs)
	}
	h.waitIdle(t)
	if out := replay(t, h.sessionDir("node", "node-1"), "out"); !strings.Contains(string(out), "node-ok\r\n") {
		t.Errorf("record of the node session lacks the command's output: %q", out)
	}
}
