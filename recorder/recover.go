package recorder

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// maxRecoveryScan bounds the sessions the startup scan looks at.
const maxRecoveryScan = 100000

// RecoverUnfinalized finds the sessions under root that the sidecar never
// finalized (it crashed or was killed mid-session) and gives each a signed
// recovery record (Recover), so that the cut is stated rather
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
			if !sess.IsDir() {
				continue
			}
			if need, err := needsRecovery(dir); err != nil || !need {
				if err != nil {
					errs = append(errs, fmt.Errorf("recorder: %s: %w", dir, err))
				}
				continue
			}
			if err := Recover(dir, opts.Signer, time.Now); err != nil {
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
// the log's tail, so a start does not re-read every transcript. The log is
// opened as every record file read back is (examine.OpenRegular): a log
// that is a link or a named pipe is an error naming it, never a hang.
func needsRecovery(dir string) (bool, error) {
	if _, err := os.Lstat(filepath.Join(dir, vocab.PTYDir, vocab.RecoveryFile)); err == nil {
		return false, nil
	}
	f, size, err := examine.OpenRegular(dir, vocab.PTYDir+"/"+vocab.LogFile)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	const tail = 64 << 10
	buf := make([]byte, min(size, tail))
	if _, err := f.ReadAt(buf, size-int64(len(buf))); err != nil && err != io.EOF {
		return false, fmt.Errorf("read log tail: %w", err)
	}
	lines := bytes.Split(bytes.TrimSuffix(buf, []byte("\n")), []byte("\n"))
	if !bytes.HasSuffix(buf, []byte("\n")) || len(lines) < 2 {
		return true, nil
	}
	var closing, last integrity.Record
	if json.Unmarshal(lines[len(lines)-2], &closing) != nil || json.Unmarshal(lines[len(lines)-1], &last) != nil {
		return true, nil
	}
	return !(closing.Type == vocab.TypeClose && last.Type == vocab.TypeCheckpoint), nil
}
