package recorder

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aptl/aptl-kali-capture/integrity"
)

// maxRecoveryScan bounds the sessions the startup scan looks at.
const maxRecoveryScan = 100000

// RecoverUnfinalized finds the sessions under root that the sidecar never
// finalized (it crashed or was killed mid-session) and gives each a signed
// recovery record (integrity.Recover), so that the cut is stated rather
// than silent. It returns the directories it recovered; a session that
// cannot be recovered is reported in the joined error and left as found.
func RecoverUnfinalized(root string, opts Options) ([]string, error) {
	runs, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recovered []string
	var errs []error
	scanned := 0
	for _, run := range runs {
		if !run.IsDir() || !ValidID(run.Name()) || ReservedRunID(run.Name()) {
			continue
		}
		sessions, err := os.ReadDir(filepath.Join(root, run.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, sess := range sessions {
			if scanned++; scanned > maxRecoveryScan {
				return recovered, errors.Join(append(errs, errors.New("recorder: recovery scan stopped at its bound"))...)
			}
			dir := filepath.Join(root, run.Name(), sess.Name())
			if !sess.IsDir() || !needsRecovery(dir) {
				continue
			}
			if err := integrity.Recover(dir, opts.Signer, time.Now); err != nil {
				errs = append(errs, err)
				continue
			}
			recovered = append(recovered, dir)
		}
	}
	return recovered, errors.Join(errs...)
}

// needsRecovery reports whether dir has a log that does not end with a
// close record and its checkpoint, and no recovery file yet. It reads only
// the log's tail, so a start does not re-read every transcript.
func needsRecovery(dir string) bool {
	ptyDir := filepath.Join(dir, integrity.PTYDir)
	if _, err := os.Stat(filepath.Join(ptyDir, integrity.RecoveryFile)); err == nil {
		return false
	}
	f, err := os.Open(filepath.Join(ptyDir, integrity.LogFile))
	if err != nil {
		return false
	}
	defer f.Close()
	const tail = 64 << 10
	st, err := f.Stat()
	if err != nil {
		return false
	}
	buf := make([]byte, min(st.Size(), tail))
	if _, err := f.ReadAt(buf, st.Size()-int64(len(buf))); err != nil && err != io.EOF {
		return false
	}
	lines := bytes.Split(bytes.TrimSuffix(buf, []byte("\n")), []byte("\n"))
	if !bytes.HasSuffix(buf, []byte("\n")) || len(lines) < 2 {
		return true
	}
	var closing, last integrity.Record
	if json.Unmarshal(lines[len(lines)-2], &closing) != nil || json.Unmarshal(lines[len(lines)-1], &last) != nil {
		return true
	}
	return !(closing.Type == integrity.TypeClose && last.Type == integrity.TypeCheckpoint)
}
