package evidence

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/sha256sums"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// The session's signed manifest (vocab.ManifestFile) is what an examiner
// checks with sha256sum and ssh-keygen alone; the verifier holds it to the
// same trust as the chain, so that the stock tools and verify cannot
// disagree. The record that sealed the session (the close record, or a
// recovery record) announces it; it is checked only when that record is
// trusted. Its signature must be by the key that signed the sealing
// checkpoint, its list must be every file of the session folder, no more,
// and its digests the files'. A fact the chain already found (a changed
// typescript byte, a witness file no record names) is not reported again
// through the manifest: one fact, one finding. A manifest announced and
// absent is a note: it is written after the sealing signature, which
// cannot cover it, so a volume that filled after the closing records or a
// crash between the two leaves none, and its absence takes nothing from
// the chain's verdict.

// Bounds of the manifest files read back: a line per file (at most
// vocab.ManifestMaxFiles lines, and short ones: the sidecar's paths are
// under 64 bytes), and an armored SSHSIG signature, a few hundred bytes.
const (
	maxManifestBytes = 8 << 20
	maxManifestSig   = 16 << 10
)

// checkSealManifest checks the manifest of a session a trusted record
// sealed: the close record with its final checkpoint, or a recovery
// statement. An unsealed session (in progress, cut, or not trusted) is
// not held to one: the chain's findings say what it lacks.
func (v *verifier) checkSealManifest() {
	switch {
	case v.rep.Finalized:
		v.checkManifest(v.closeRec, v.closeSeq, v.lastSigner)
	case v.recovery != nil:
		v.checkManifest(v.recovery, int64(v.recovery.Seq), v.recoverySigner)
	}
}

// checkManifest checks the manifest announced by sealing, the trusted
// record (seq) that sealed the session, whose checkpoint signer signed.
func (v *verifier) checkManifest(sealing *integrity.Record, seq int64, signer gossh.PublicKey) {
	if sealing.Attrs[vocab.AttrManifest] == "" {
		// A session sealed before manifests were written has none; one
		// there now was put there afterwards.
		for _, name := range []string{vocab.ManifestFile, vocab.ManifestSigFile} {
			if _, err := os.Lstat(filepath.Join(v.rep.Dir, name)); !errors.Is(err, fs.ErrNotExist) {
				v.anomaly(KindManifestUnlisted, name, seq, -1, "no signed record announces a manifest, and the folder holds %s", name)
			}
		}
		return
	}
	if got := sealing.Attrs[vocab.AttrManifest]; got != vocab.ManifestFile {
		v.anomaly(KindRecordMalformed, vocab.LogFile, seq, -1, "the record announces the manifest %.64q; the sidecar writes %s", got, vocab.ManifestFile)
		return
	}
	list, listErr := readManifestFile(v.rep.Dir, vocab.ManifestFile, maxManifestBytes)
	sig, sigErr := readManifestFile(v.rep.Dir, vocab.ManifestSigFile, maxManifestSig)
	if absent := manifestAbsent(listErr, sigErr); absent != "" {
		v.note(NoteManifestAbsent, "the record %d that sealed the session announces %s, but %s not in the folder (it is written after that record's signature: a volume that filled after the closing records, a crash between the two, or a copy made without it); sha256sum -c cannot check this folder, and the chain's verdict stands", seq, vocab.ManifestFile, absent)
		return
	}
	for _, f := range []struct {
		name string
		err  error
	}{{vocab.ManifestFile, listErr}, {vocab.ManifestSigFile, sigErr}} {
		if f.err != nil {
			v.anomaly(KindFileUnreadable, f.name, -1, -1, "%v", f.err)
			return
		}
	}
	if !v.manifestSigned(list, string(sig), signer) {
		return
	}
	entries, err := sha256sums.Parse(list, vocab.ManifestMaxFiles)
	if err != nil {
		v.anomaly(KindManifestMalformed, vocab.ManifestFile, -1, -1, "%v", err)
		return
	}
	v.compareManifest(entries)
}

// manifestAbsent says which of the two manifest files are absent when
// either is ("" when both are there).
func manifestAbsent(listErr, sigErr error) string {
	list, sig := errors.Is(listErr, fs.ErrNotExist), errors.Is(sigErr, fs.ErrNotExist)
	switch {
	case list && sig:
		return "neither it nor " + vocab.ManifestSigFile + " is"
	case list:
		return "it is"
	case sig:
		return "its signature " + vocab.ManifestSigFile + " is"
	}
	return ""
}

// readManifestFile reads a manifest file of the session folder dir whole,
// as every session file is opened (no link, a regular file), refusing one
// past limit bytes unread.
func readManifestFile(dir, name string, limit int64) ([]byte, error) {
	f, size, err := safefs.OpenRegular(dir, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a manifest file of a session can be; not read", name, size, limit)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return data, nil
}

// manifestSigned checks the manifest's signature: valid in the manifest's
// namespace, by a trusted key, and by the key that signed the sealing
// checkpoint (signer), so that a manifest is never worth more than the
// chain it describes.
func (v *verifier) manifestSigned(list []byte, sig string, signer gossh.PublicKey) bool {
	pub, err := integrity.VerifySSHSIG(sig, integrity.ManifestNamespace, list)
	if err != nil {
		v.anomaly(KindSignatureInvalid, vocab.ManifestSigFile, -1, -1, "the manifest's signature: %v", err)
		return false
	}
	// A recovered session's manifest is the restarted sidecar's, signed
	// with the host key as its recovery statement is (recovery.go).
	if kind, why := v.untrustedSigner(pub, !v.rep.Finalized); kind != "" {
		v.anomaly(kind, vocab.ManifestSigFile, -1, -1, "the manifest is %s", why)
		return false
	}
	if signer != nil && !bytes.Equal(pub.Marshal(), signer.Marshal()) {
		v.anomaly(KindUntrustedKey, vocab.ManifestSigFile, -1, -1, "the manifest is signed by %s, not by %s, which signed the checkpoint that sealed the session",
			describeSigner(pub), describeSigner(signer))
		return false
	}
	return true
}

// compareManifest holds the manifest's list to the session folder: every
// file listed is there with the digest listed, and every file there is
// listed.
func (v *verifier) compareManifest(entries []sha256sums.Entry) {
	present, ok := v.sessionFolderFiles()
	if !ok {
		return
	}
	listed := make(map[string]bool, len(entries))
	for _, e := range entries {
		listed[e.Path] = true
		if !present[e.Path] {
			if !v.foundIn(e.Path) {
				v.anomaly(KindManifestMissingFile, e.Path, -1, -1, "the manifest lists this file, which is not in the folder")
			}
			continue
		}
		if v.foundIn(e.Path) {
			continue // the chain's finding on this file stands for it
		}
		got, err := v.fileDigest(e.Path)
		if err != nil {
			v.anomaly(KindFileUnreadable, e.Path, -1, -1, "%v", err)
			continue
		}
		if got != e.SHA256 {
			v.anomaly(KindManifestMismatch, e.Path, -1, -1, "the file's SHA-256 differs from the manifest's").differs(e.SHA256, got)
		}
	}
	for path := range present {
		if !listed[path] && !v.foundIn(path) {
			v.anomaly(KindManifestUnlisted, path, -1, -1, "a file of the session folder that the manifest does not list")
		}
	}
}

// foundIn reports whether an anomaly already concerns the file at path
// (relative to the session folder): the chain's anomalies name the pty
// folder's files by their name alone, the witnesses' by their path.
func (v *verifier) foundIn(path string) bool {
	name := strings.TrimPrefix(path, vocab.PTYDir+"/")
	for _, a := range v.rep.Anomalies {
		if a.File == name || a.File == path {
			return true
		}
	}
	return false
}

// sessionFolderFiles lists the session folder as the manifest describes
// it: the files of each folder in it, by path; at its top only folders
// and the two manifest files. Anything else is reported, and ok is false
// when the folder cannot be listed.
func (v *verifier) sessionFolderFiles() (map[string]bool, bool) {
	top, err := listFolder(v.rep.Dir)
	if err != nil {
		v.anomaly(KindFileUnreadable, ".", -1, -1, "%v", err)
		return nil, false
	}
	present := map[string]bool{}
	for _, e := range top {
		switch name := e.Name(); {
		case name == vocab.ManifestFile || name == vocab.ManifestSigFile:
		case !e.IsDir():
			v.anomaly(KindManifestUnlisted, name, -1, -1, "%s in the session folder, which holds only folders and the manifest", safefs.DescribeMode(e.Type()))
		default:
			files, err := listFolder(filepath.Join(v.rep.Dir, name))
			if err != nil {
				v.anomaly(KindFileUnreadable, name, -1, -1, "%v", err)
				continue
			}
			for _, f := range files {
				present[name+"/"+f.Name()] = true
			}
		}
	}
	return present, true
}

// listFolder lists a folder of the session, bounded.
func listFolder(path string) ([]os.DirEntry, error) {
	d, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(vocab.ManifestMaxFiles + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(entries) > vocab.ManifestMaxFiles {
		return nil, fmt.Errorf("more than %d entries; not listed further", vocab.ManifestMaxFiles)
	}
	return entries, nil
}

// fileDigest is the SHA-256 of the session file at path. The typescript
// and timing of a finalized session are not read again: with no finding
// on them and the size the close record states, the verifier found them
// equal to its digests already.
func (v *verifier) fileDigest(path string) (string, error) {
	if sum, ok := v.vouchedWhole(path); ok {
		return sum, nil
	}
	f, size, err := safefs.OpenRegular(v.rep.Dir, path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	// Not counted as progress: Options.Progress counts each byte of the
	// session's files once, and these were read before.
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size)); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// vouchedWhole returns the close record's digest of the typescript or the
// when the typescript pass checked the whole file against it: the session
// is finalized, the pass read the file to its end undamaged, the file is
// the size the record states, and no finding concerns it (foundIn, which
// the caller asked first). The typescript is most of a session's bytes;
// the other files are read again.
func (v *verifier) vouchedWhole(path string) (string, bool) {
	if path != vocab.PTYDir+"/"+vocab.TypescriptFile || !v.rep.Finalized || v.closeRec == nil || v.tsPass == nil {
		return "", false
	}
	a := v.closeRec.Attrs
	return a[vocab.AttrTSSHA256], !v.tsPass.damaged && !v.tsPass.ended && a[vocab.AttrTSSize] == strconv.FormatInt(v.tsSize, 10)
}
