package safefs

import (
	"os"
	"path/filepath"
)

// ReplaceFile replaces path whole with data, mode perm: written to a
// temporary file beside it, synced, then renamed over it, so a reader
// (health reading the readiness file, the next run reading the audit
// witness's owned rules) sees the old file or the new one, never half of
// one, and a crash leaves one of the two.
func ReplaceFile(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), perm)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
