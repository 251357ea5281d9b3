package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestSessionSymlinksNotFollowed replaces files of a finalized session by
// symbolic links to intact copies, so that following them would verify:
// verify, verify --run-dir and both exports must report the link and not
// read through it.
func TestSessionSymlinksNotFollowed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped in -short mode")
	}
	bin := buildCommand(t)
	signer := newTestSigner(t)
	pub := writePubKey(t, signer.PublicKey())
	elsewhere := t.TempDir()

	// linkTo moves rel (under dir) elsewhere and leaves a symbolic link.
	linkTo := func(dir, rel string) {
		target := filepath.Join(elsewhere, strings.ReplaceAll(dir+"/"+rel, "/", "_"))
		if err := os.Rename(filepath.Join(dir, rel), target); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, rel)); err != nil {
			t.Fatal(err)
		}
	}
	cases := []string{"pty/" + vocab.TypescriptFile, "pty/" + vocab.TimingFile, "pty/" + vocab.LogFile, "pty"}
	for i, rel := range cases {
		t.Run(rel, func(t *testing.T) {
			runDir := filepath.Join(t.TempDir(), "run-s")
			id := "sess-" + string(rune('a'+i))
			dir := recordFinalized(t, filepath.Join(runDir, "scratch"), "run-s", id, signer)
			session := filepath.Join(runDir, "kali-side", id)
			if err := os.MkdirAll(filepath.Dir(session), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(dir, session); err != nil {
				t.Fatal(err)
			}
			if out, code := runCommand(t, bin, "verify", "--key", pub, session); code != 0 {
				t.Fatalf("the intact session does not verify: exit %d\n%s", code, out)
			}
			linkTo(session, rel)
			if rep := evidence.Verify(session, evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}, evidence.Options{}); rep.OK() {
				t.Errorf("Verify followed the symbolic link %s", rel)
			}
			for _, args := range [][]string{
				{"verify", "--key", pub, session},
				{"verify", "--key", pub, "--run-dir", runDir},
			} {
				out, code := runCommand(t, bin, args...)
				if code != 1 || !strings.Contains(string(out), "symbolic link") {
					t.Errorf("%v with %s a symbolic link: exit %d, want 1 and the link reported:\n%s", args, rel, code, out)
				}
			}
			// export head reads only the log; asciicast the timing and typescript.
			var exports [][]string
			if rel != "pty/"+vocab.TypescriptFile && rel != "pty/"+vocab.TimingFile {
				exports = append(exports, []string{"export", "--format", "head", "--out", t.TempDir(), session})
			}
			if rel != "pty/"+vocab.LogFile {
				exports = append(exports, []string{"export", "--format", "asciicast", "--out", filepath.Join(t.TempDir(), "s.cast"), session})
			}
			for _, args := range exports {
				out, code := runCommand(t, bin, args...)
				if code != 1 || !strings.Contains(string(out), "symbolic link") {
					t.Errorf("%v with %s a symbolic link: exit %d, want 1 and the link reported:\n%s", args, rel, code, out)
				}
			}
		})
	}
}
