package ship

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// localFile is a file of a session folder, by its path in the folder, and
// its size when listed.
type localFile struct {
	rel  string
	size int64
}

// listSession lists the files of the session folder dir as the manifest
// describes it: the regular files of each folder in it, then the two
// manifest files. Entries of any other kind are not shipped; skipped
// names them, for the caller's log (a session folder of the sidecar's
// holds none). Bounded as the manifest is (vocab.ManifestMaxFiles).
func listSession(dir string) (files []localFile, skipped []string, err error) {
	top, err := listFolder(dir)
	if err != nil {
		return nil, nil, err
	}
	var manifest []localFile
	for _, e := range top {
		name := e.Name()
		switch {
		case name == vocab.ManifestFile || name == vocab.ManifestSigFile:
			if fi, err := os.Lstat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() {
				manifest = append(manifest, localFile{name, fi.Size()})
			} else {
				skipped = append(skipped, name)
			}
		case e.IsDir():
			inner, err := listFolder(filepath.Join(dir, name))
			if err != nil {
				return nil, nil, err
			}
			for _, f := range inner {
				rel := name + "/" + f.Name()
				fi, err := f.Info()
				if err != nil || !fi.Mode().IsRegular() {
					skipped = append(skipped, rel)
					continue
				}
				if len(files) == vocab.ManifestMaxFiles {
					return nil, nil, fmt.Errorf("ship: %s: more than %d files", dir, vocab.ManifestMaxFiles)
				}
				files = append(files, localFile{rel, fi.Size()})
			}
		default:
			skipped = append(skipped, name)
		}
	}
	slices.SortFunc(files, func(a, b localFile) int { return strings.Compare(a.rel, b.rel) })
	// The list goes up last (SHA256SUMS after its signature): a folder
	// whose manifest is in the bucket is in the bucket whole.
	slices.SortFunc(manifest, func(a, b localFile) int { return -strings.Compare(a.rel, b.rel) })
	return append(files, manifest...), skipped, nil
}

// listFolder lists a folder, bounded; a link in its place is refused.
func listFolder(path string) ([]os.DirEntry, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("ship: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("ship: %s: %s, not a folder", path, safefs.DescribeMode(fi.Mode()))
	}
	d, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ship: %w", err)
	}
	defer d.Close()
	entries, err := d.ReadDir(vocab.ManifestMaxFiles + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("ship: list %s: %w", path, err)
	}
	if len(entries) > vocab.ManifestMaxFiles {
		return nil, fmt.Errorf("ship: %s: more than %d entries", path, vocab.ManifestMaxFiles)
	}
	return entries, nil
}

// section is a range of a session file, open for reading: the bytes a
// segment or a part uploads, read from the local copy (which stays
// authoritative) as often as a retry needs, never held in memory whole.
type section struct {
	f   *os.File
	off int64
	n   int64
	sum [sha256.Size]byte
}

// openSection opens [off, off+n) of the session file rel of dir, through
// no link, and digests it; a file shorter than that is an error (a file
// the sidecar appends to does not shrink).
func openSection(dir, rel string, off, n int64) (*section, error) {
	f, size, err := safefs.OpenRegular(dir, rel)
	if err != nil {
		return nil, fmt.Errorf("ship: %w", err)
	}
	if off+n > size {
		f.Close()
		return nil, fmt.Errorf("ship: %s: %d bytes, shorter than the %d to ship", rel, size, off+n)
	}
	s := &section{f: f, off: off, n: n}
	h := sha256.New()
	if _, err := io.Copy(h, s.reader()); err != nil {
		f.Close()
		return nil, fmt.Errorf("ship: read %s: %w", rel, err)
	}
	h.Sum(s.sum[:0])
	return s, nil
}

// reader reads the section from its start.
func (s *section) reader() *io.SectionReader { return io.NewSectionReader(s.f, s.off, s.n) }

func (s *section) close() { s.f.Close() }
