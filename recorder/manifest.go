package recorder

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/sha256sums"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// A sealed session's signed manifest (vocab.ManifestFile): once the close
// record and its checkpoint are durable (Close), or the recovery file is
// (recoverIn), the recorder lists every file of the session folder with
// its SHA-256 and signs the list, so a harvested folder is checked with
// `sha256sum -c` and `ssh-keygen -Y verify` alone. The record that seals
// the session announces it (vocab.AttrManifest); the manifest itself is
// made after that record's signature, which cannot cover it, and covers
// the log that holds it. It adds no trust the chain does not give: the
// verifier holds it to the folder and to the chain's signer, and a
// manifest missing where one was announced (a disk that filled after the
// closing records, a crash between the two) is a note, never a failure.

// maxManifestRead bounds a file the manifest reads back to digest it (the log, a witness file; the transcript's
// digests the recorder kept, or the recovery read): no such file of a
// session the verifier accepts is larger (it reads a log of at most
// 1 GiB; witness files rotate at a few MiB), so a sparse terabyte planted
// in the folder costs the close or the restart nothing.
const maxManifestRead = 1 << 30

// writeManifest lists the session folder d (its pty folder and every
// witness folder in it; files only, never through a link), digests each
// file, or takes its digest from known (path relative to the session
// folder → SHA-256 hex) where the recorder kept it while writing, signs
// the list with signer and writes SHA256SUMS and SHA256SUMS.sig in the
// session folder, each whole or not at all (createWholeIn); the caller
// syncs the session folder, which makes their names durable. A folder
// entry that is neither a folder nor a regular file is an error naming
// it: the manifest would not describe the folder.
func writeManifest(d *sessionDirs, signer gossh.Signer, known map[string]string) error {
	entries, err := manifestEntries(d, known)
	if err != nil {
		return fmt.Errorf("recorder: manifest of %s: %w", d.path, err)
	}
	list, err := sha256sums.Format(entries)
	if err != nil {
		return fmt.Errorf("recorder: manifest of %s: %w", d.path, err)
	}
	sig, err := integrity.SignSSHSIG(signer, integrity.ManifestNamespace, list)
	if err != nil {
		return fmt.Errorf("recorder: manifest of %s: %w", d.path, err)
	}
	// The list is named before its signature: a crash between the two
	// leaves a list without one, which sha256sum still checks.
	return d.createWholeIn(d.session, wholeFile{vocab.ManifestFile, list}, wholeFile{vocab.ManifestSigFile, []byte(sig)})
}

// manifestEntries lists and digests the files of the session folder.
func manifestEntries(d *sessionDirs, known map[string]string) ([]sha256sums.Entry, error) {
	top, err := readDirIn(d.session, d.path)
	if err != nil {
		return nil, err
	}
	var entries []sha256sums.Entry
	for _, e := range top {
		name := e.Name()
		if name == vocab.ManifestFile || name == vocab.ManifestSigFile {
			return nil, fmt.Errorf("%s: %w", name, os.ErrExist)
		}
		// A link in place of a folder (a pty folder swapped for one
		// during a recovery included) leaves no manifest: it would not
		// describe what an examiner finds.
		if !e.IsDir() {
			return nil, fmt.Errorf("%s: not a folder (%s)", name, safefs.DescribeMode(e.Type()))
		}
		// The pty folder is read through the fd the recorder wrote it
		// by; every other folder is opened beneath the session's.
		dir := d.pty
		if name != vocab.PTYDir {
			if dir, err = safefs.OpenDirBeneath(d.session, name); err != nil {
				return nil, err
			}
		}
		entries, err = appendFolder(entries, dir, name, known)
		if dir != d.pty {
			dir.Close()
		}
		if err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// appendFolder adds the regular files of dir, the session's folder name.
func appendFolder(entries []sha256sums.Entry, dir *os.File, name string, known map[string]string) ([]sha256sums.Entry, error) {
	files, err := readDirIn(dir, name)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		rel := name + "/" + f.Name()
		if len(entries) == vocab.ManifestMaxFiles {
			return nil, fmt.Errorf("more than %d files", vocab.ManifestMaxFiles)
		}
		if !f.Type().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file (%s)", rel, safefs.DescribeMode(f.Type()))
		}
		sum, ok := known[rel]
		if !ok {
			if sum, err = digestIn(dir, f.Name()); err != nil {
				return nil, fmt.Errorf("%s: %w", rel, err)
			}
		}
		entries = append(entries, sha256sums.Entry{Path: rel, SHA256: sum})
	}
	return entries, nil
}

// transcriptDigests are the typescript's and timing file's digests by
// their path in the session folder, as the manifest takes them.
func transcriptDigests(typescript, timing string) map[string]string {
	return map[string]string{
		vocab.PTYDir + "/" + vocab.TypescriptFile: typescript,
		vocab.PTYDir + "/" + vocab.TimingFile:     timing,
	}
}

// readDirIn lists the open folder dir, called name in errors, from its
// start, bounded.
func readDirIn(dir *os.File, name string) ([]os.DirEntry, error) {
	// A duplicate of the fd's open file would share its offset; the
	// folder is opened again relative to itself, so each listing starts
	// at the beginning and leaves dir's offset alone.
	again, err := safefs.OpenDirBeneath(dir, ".")
	if err != nil {
		return nil, err
	}
	defer again.Close()
	list, err := again.ReadDir(vocab.ManifestMaxFiles + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("list %s: %w", name, err)
	}
	if len(list) > vocab.ManifestMaxFiles {
		return nil, fmt.Errorf("%s: more than %d entries", name, vocab.ManifestMaxFiles)
	}
	return list, nil
}

// digestIn returns the SHA-256 of the regular file name in dir, read to
// the size it had when opened.
func digestIn(dir *os.File, name string) (string, error) {
	f, size, err := safefs.OpenRegularIn(dir, name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if size > maxManifestRead {
		return "", fmt.Errorf("%d bytes, more than the %d a manifest reads of one file; not read", size, maxManifestRead)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
