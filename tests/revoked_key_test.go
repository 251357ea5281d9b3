package tests

import (
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

// TestVerifyHonoursKnownHostsMarkers gives verify known_hosts files with
// markers: a session signed by a key marked @revoked fails, saying so,
// even when the same key is also listed as trusted; a @cert-authority
// line is refused with a message naming it.
func TestVerifyHonoursKnownHostsMarkers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped in -short mode")
	}
	bin := buildCommand(t)
	signer := newTestSigner(t)
	dir := recordFinalized(t, t.TempDir(), "run-k", "sess-k", signer)
	key := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer.PublicKey())))
	knownHosts := func(lines ...string) string {
		path := filepath.Join(t.TempDir(), "known_hosts")
		writeFile(t, path, []byte(strings.Join(lines, "\n")+"\n"))
		return path
	}

	if out, code := runCommand(t, bin, "verify", "--key", knownHosts("sidecar "+key), dir); code != 0 {
		t.Fatalf("verify with the key trusted: exit %d\n%s", code, out)
	}
	out, code := runCommand(t, bin, "verify", "--key", knownHosts("sidecar "+key, "@revoked * "+key), dir)
	if code != 1 || !strings.Contains(string(out), "revoked") || strings.HasPrefix(string(out), "OK") {
		t.Errorf("verify of a session signed by a revoked key: exit %d, want 1 and a message saying revoked:\n%s", code, out)
	}
	out, code = runCommand(t, bin, "verify", "--key", knownHosts("@cert-authority *.lab "+key), dir)
	if code != 2 || !strings.Contains(string(out), "@cert-authority") {
		t.Errorf("verify with a @cert-authority line: exit %d, want 2 and a message naming it:\n%s", code, out)
	}
}
