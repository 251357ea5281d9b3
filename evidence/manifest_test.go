package evidence_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// sealedSession records a finalized session with the real recorder and
// returns its folder, whose manifest the recorder wrote.
func sealedSession(t *testing.T) string {
	t.Helper()
	run := recordertest.NewRunDir(t)
	recordertest.Record(t, run, recordertest.PTYSpec("sess-m"))
	return filepath.Join(run, vocab.KaliSideDir, "sess-m")
}

// resign replaces the session's manifest with list, signed by signer in
// namespace, as a thief holding that key would.
func resign(t *testing.T, dir string, list []byte, signer gossh.Signer, namespace string) {
	t.Helper()
	sig, err := integrity.SignSSHSIG(signer, namespace, list)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, vocab.ManifestFile), list)
	mustWrite(t, filepath.Join(dir, vocab.ManifestSigFile), []byte(sig))
}

func mustWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readManifest(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, vocab.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wrongDigest zeroes the digest the manifest lists for path and signs it
// again with the session's key, as a thief holding it would.
func wrongDigest(path string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		list := readManifest(t, dir)
		i := bytes.Index(list, []byte("  "+path+"\n"))
		copy(list[i-64:i], strings.Repeat("0", 64))
		resign(t, dir, list, recordertest.Signer(), integrity.ManifestNamespace)
	}
}

// onlyFinding fails unless the report's one anomaly is kind on file.
func onlyFinding(t *testing.T, rep *evidence.Report, kind evidence.Kind, file string) {
	t.Helper()
	if rep.Status != evidence.StatusTampered || len(rep.Anomalies) != 1 || rep.Anomalies[0].Kind != kind || rep.Anomalies[0].File != file {
		t.Fatalf("verdict %s %v, want tampered with exactly one %s on %s", rep.Status, rep.Anomalies, kind, file)
	}
}

func TestSealedSessionManifestVerifies(t *testing.T) {
	dir := sealedSession(t)
	rep := verify(dir, recordertest.Trusted()...)
	if !rep.OK() || len(rep.Notes) != 0 {
		t.Fatalf("a sealed session with its manifest: %s %v %v, want ok without a note", rep.Status, rep.Anomalies, rep.Notes)
	}
}

// The forgeries and accidents of the manifest, each with the one finding
// it owes, and a removed manifest, which is a note.
func TestManifestFindings(t *testing.T) {
	signer := recordertest.Signer()
	thief := testutil.NewSigner()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		kind   evidence.Kind
		file   string
	}{
		{"altered, not re-signed", func(t *testing.T, dir string) {
			list := readManifest(t, dir)
			list[0] ^= 1
			mustWrite(t, filepath.Join(dir, vocab.ManifestFile), list)
		}, evidence.KindSignatureInvalid, vocab.ManifestSigFile},
		{"signed in the heads' namespace", func(t *testing.T, dir string) {
			resign(t, dir, readManifest(t, dir), signer, integrity.HeadNamespace)
		}, evidence.KindSignatureInvalid, vocab.ManifestSigFile},
		{"re-signed by a key not trusted", func(t *testing.T, dir string) {
			resign(t, dir, readManifest(t, dir), thief, integrity.ManifestNamespace)
		}, evidence.KindUntrustedKey, vocab.ManifestSigFile},
		{"a wrong digest, re-signed with the session's key", wrongDigest("pty/timing"), evidence.KindManifestMismatch, "pty/timing"},
		// The typescript's digest is the one the chain checked already.
		{"a wrong typescript digest, re-signed", wrongDigest("pty/typescript"), evidence.KindManifestMismatch, "pty/typescript"},
		{"a file listed that is not there", func(t *testing.T, dir string) {
			sum := sha256.Sum256([]byte("notes"))
			list := append(readManifest(t, dir), []byte(hex.EncodeToString(sum[:])+"  pty/notes.txt\n")...)
			resign(t, dir, list, signer, integrity.ManifestNamespace)
		}, evidence.KindManifestMissingFile, "pty/notes.txt"},
		{"a file planted beside the record files", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, vocab.PTYDir, "notes.txt"), []byte("planted"))
		}, evidence.KindManifestUnlisted, "pty/notes.txt"},
		{"a file planted beside pty/", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "README"), []byte("planted"))
		}, evidence.KindManifestUnlisted, "README"},
		{"a line sha256sum's format does not have, re-signed", func(t *testing.T, dir string) {
			list := bytes.Replace(readManifest(t, dir), []byte("  pty/timing"), []byte(" *pty/timing"), 1)
			resign(t, dir, list, signer, integrity.ManifestNamespace)
		}, evidence.KindManifestMalformed, vocab.ManifestFile},
		{"a link in place of the manifest", func(t *testing.T, dir string) {
			path := filepath.Join(dir, vocab.ManifestFile)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}, evidence.KindFileUnreadable, vocab.ManifestFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := sealedSession(t)
			tc.damage(t, dir)
			onlyFinding(t, verify(dir, signer.PublicKey()), tc.kind, tc.file)
		})
	}
}

// A manifest signed by a key the examiner trusts, but not by the one that
// signed the session's last checkpoint, is worth no more than a thief's:
// trusting two keys must not let either vouch for the other's sessions.
func TestManifestMustBeSignedByTheSealingKey(t *testing.T) {
	dir := sealedSession(t)
	other := testutil.NewSigner()
	resign(t, dir, readManifest(t, dir), other, integrity.ManifestNamespace)
	rep := verify(dir, recordertest.Signer().PublicKey(), other.PublicKey())
	onlyFinding(t, rep, evidence.KindUntrustedKey, vocab.ManifestSigFile)
	if !strings.Contains(rep.Anomalies[0].Msg, "which signed the checkpoint that sealed the session") {
		t.Errorf("the finding %q does not say which key should have signed", rep.Anomalies[0].Msg)
	}
}

// One changed byte of the typescript is one finding: the chain's, not the
// manifest's besides.
func TestManifestRepeatsNoFindingOfTheChain(t *testing.T) {
	dir := sealedSession(t)
	editFile(t, ptyFile(dir, vocab.TypescriptFile), func(b []byte) []byte { b[len(b)-40] ^= 1; return b })
	rep := verify(dir, recordertest.Trusted()...)
	for _, a := range rep.Anomalies {
		if strings.HasPrefix(string(a.Kind), "manifest-") {
			t.Errorf("the manifest repeats the chain's finding: %v", rep.Anomalies)
		}
	}
	if rep.Status != evidence.StatusTampered || len(rep.Anomalies) == 0 {
		t.Fatalf("a changed typescript byte: %s %v, want tampered", rep.Status, rep.Anomalies)
	}
}

// A sealed session without its manifest (or its signature) is as the
// chain says, with a note saying what is missing and why that fails
// nothing.
func TestAbsentManifestIsANote(t *testing.T) {
	for _, name := range []string{vocab.ManifestFile, vocab.ManifestSigFile} {
		t.Run(name, func(t *testing.T) {
			dir := sealedSession(t)
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			rep := verify(dir, recordertest.Trusted()...)
			var noted bool
			for _, n := range rep.Notes {
				noted = noted || n.Kind == evidence.NoteManifestAbsent && strings.Contains(n.Msg, name)
			}
			if !rep.OK() || !noted {
				t.Fatalf("without %s: %s %v %v, want ok with a %s note naming it", name, rep.Status, rep.Anomalies, rep.Notes, evidence.NoteManifestAbsent)
			}
		})
	}
}

// A recovered session's manifest is checked as a closed one's: it lists
// the recovery file, and a file planted afterwards is found.
func TestRecoveredSessionManifest(t *testing.T) {
	signer := recordertest.Signer()
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-r", "sess-r", signer, nil, nil)
	if err := recordertest.Recover(dir, signer); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readManifest(t, dir)), "  pty/"+vocab.RecoveryFile+"\n") {
		t.Fatalf("the recovered session's manifest does not list the recovery file:\n%s", readManifest(t, dir))
	}
	rep := verify(dir, signer.PublicKey())
	if rep.Status != evidence.StatusUnfinalized || len(rep.Anomalies) != 2 {
		t.Fatalf("recovered: %s %v, want unfinalized with the unfinalized and recovered statements only", rep.Status, rep.Anomalies)
	}
	mustWrite(t, filepath.Join(dir, vocab.PTYDir, "late.txt"), []byte("planted"))
	if rep := verify(dir, signer.PublicKey()); rep.Status != evidence.StatusTampered || !hasKind(rep, evidence.KindManifestUnlisted, "pty/late.txt") {
		t.Fatalf("a file planted in a recovered session: %s %v, want tampered with %s", rep.Status, rep.Anomalies, evidence.KindManifestUnlisted)
	}
}
