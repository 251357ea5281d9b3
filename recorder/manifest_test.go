package recorder

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/sha256sums"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// checkWithStockTools runs what an examiner runs on a harvested session
// folder, with no tool of ours: `sha256sum -c` of the manifest, and
// `ssh-keygen -Y verify` of its signature with the signer's public key in
// an allowed_signers file. It returns the files the manifest lists.
func checkWithStockTools(t *testing.T, dir string, signer gossh.PublicKey) []string {
	t.Helper()
	sum, err1 := exec.LookPath("sha256sum")
	keygen, err2 := exec.LookPath("ssh-keygen")
	if err1 != nil || err2 != nil {
		t.Skip("sha256sum (coreutils) or ssh-keygen (openssh-client) is not installed: the manifest cannot be checked with the stock tools here")
	}
	cmd := exec.Command(sum, "--check", "--strict", vocab.ManifestFile)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c %s: %v\n%s", vocab.ManifestFile, err, out)
	}
	allowed := filepath.Join(t.TempDir(), "allowed_signers")
	line := "aptl-kali-capture " + strings.TrimSpace(string(gossh.MarshalAuthorizedKey(signer))) + "\n"
	if err := os.WriteFile(allowed, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, vocab.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	verify := func(namespace string, data []byte) ([]byte, error) {
		cmd := exec.Command(keygen, "-Y", "verify", "-f", allowed, "-I", "aptl-kali-capture", "-n", namespace, "-s", filepath.Join(dir, vocab.ManifestSigFile))
		cmd.Stdin = bytes.NewReader(data)
		return cmd.CombinedOutput()
	}
	if out, err := verify(integrity.ManifestNamespace, manifest); err != nil {
		t.Fatalf("ssh-keygen -Y verify of the manifest: %v\n%s", err, out)
	}
	// The signature is the manifest's, in its own namespace: neither an
	// altered manifest nor a head's namespace verifies.
	if out, err := verify(integrity.ManifestNamespace, append(manifest, manifest[:80]...)); err == nil {
		t.Errorf("ssh-keygen accepted the signature for an altered manifest:\n%s", out)
	}
	if out, err := verify(integrity.HeadNamespace, manifest); err == nil {
		t.Errorf("ssh-keygen accepted the manifest's signature in the heads' namespace:\n%s", out)
	}
	entries, err := sha256sums.Parse(manifest, vocab.ManifestMaxFiles)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range entries {
		paths = append(paths, e.Path)
	}
	return paths
}

// TestClosedSessionHasASignedManifest: the close record announces the
// manifest, and the folder the session leaves checks out with sha256sum
// and ssh-keygen alone, listing exactly the three record files.
func TestClosedSessionHasASignedManifest(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "run-m", SessionID: "sess-m"})
	mustOK(t, s.Output([]byte("uid=0(root)\r\n")))
	mustOK(t, s.Input([]byte("exit\r")))
	mustOK(t, s.Close(0))
	closing := ofType(logRecords(t, s.Dir()), vocab.TypeClose)
	if len(closing) != 1 || closing[0].Attrs[vocab.AttrManifest] != vocab.ManifestFile {
		t.Fatalf("close records %v: want one announcing %s", closing, vocab.ManifestFile)
	}
	got := checkWithStockTools(t, s.Dir(), testOptions().Signer.PublicKey())
	want := []string{"pty/integrity.jsonl", "pty/timing", "pty/typescript"}
	if !slices.Equal(got, want) {
		t.Fatalf("the manifest lists %v, want %v", got, want)
	}
}

// TestRecoveredSessionHasASignedManifest: the recovery seals a session a
// crash cut, and its manifest lists the files as the restart found them,
// the recovery file among them.
func TestRecoveredSessionHasASignedManifest(t *testing.T) {
	root := t.TempDir()
	dir := crashedSession(t, root)
	if _, err := os.Lstat(filepath.Join(dir, vocab.ManifestFile)); !os.IsNotExist(err) {
		t.Fatalf("a session cut before its close has a manifest (lstat: %v)", err)
	}
	if recovered, err := recoverUnfinalized(root, testOptions()); err != nil || len(recovered) != 1 {
		t.Fatalf("recovered %v, err %v", recovered, err)
	}
	statement, err := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.RecoveryFile))
	if err != nil || !strings.Contains(string(statement), `"`+vocab.AttrManifest+`":"`+vocab.ManifestFile+`"`) {
		t.Fatalf("the recovery record does not announce the manifest (%v):\n%s", err, statement)
	}
	got := checkWithStockTools(t, dir, testOptions().Signer.PublicKey())
	want := []string{"pty/integrity.jsonl", "pty/recovery.jsonl", "pty/timing", "pty/typescript"}
	if !slices.Equal(got, want) {
		t.Fatalf("the manifest lists %v, want %v", got, want)
	}
}

// TestManifestRefusesWhatItCannotDescribe: a session folder entry that is
// neither a folder nor a regular file (a link planted beside pty/) leaves
// no manifest and an error naming it, never a list that skips it.
func TestManifestRefusesWhatItCannotDescribe(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "run-l", SessionID: "sess-l"})
	mustOK(t, s.Output([]byte("x")))
	if err := os.Symlink("/etc", filepath.Join(s.Dir(), "pcap")); err != nil {
		t.Fatal(err)
	}
	err := s.Close(0)
	if err == nil || !strings.Contains(err.Error(), "pcap: not a folder (a symbolic link)") {
		t.Fatalf("Close with a link planted in the session folder = %v, want an error naming it", err)
	}
	for _, name := range []string{vocab.ManifestFile, vocab.ManifestSigFile} {
		if _, err := os.Lstat(filepath.Join(s.Dir(), name)); !os.IsNotExist(err) {
			t.Errorf("%s was written (lstat: %v)", name, err)
		}
	}
	// The record itself is sealed: the verifier says what is missing.
	os.Remove(filepath.Join(s.Dir(), "pcap"))
}

// TestRecoveryLeavesAFoundManifestAlone: a file named SHA256SUMS in a
// session the restart recovers was put there by someone else (the
// sidecar writes one only after a sealing record): the recovery stands,
// the file is left as found, and the outcome says why no manifest was
// written.
func TestRecoveryLeavesAFoundManifestAlone(t *testing.T) {
	root := t.TempDir()
	dir := crashedSession(t, root)
	planted := []byte("not the sidecar's\n")
	mustOK(t, os.WriteFile(filepath.Join(dir, vocab.ManifestFile), planted, 0o600))
	outcomes, err := recoverAll(root, testOptions())
	mustOK(t, err)
	if len(outcomes) != 1 || outcomes[0].Err != nil || outcomes[0].ManifestErr == nil || !strings.Contains(outcomes[0].ManifestErr.Error(), vocab.ManifestFile+": file already exists") {
		t.Fatalf("outcomes %+v: want the session recovered, and no manifest written over the one found", outcomes)
	}
	if got, err := os.ReadFile(filepath.Join(dir, vocab.ManifestFile)); err != nil || !bytes.Equal(got, planted) {
		t.Fatalf("the file found was replaced: %q, %v", got, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, vocab.ManifestSigFile)); !os.IsNotExist(err) {
		t.Fatalf("a signature was written beside the file found (lstat: %v)", err)
	}
}
