package integrity

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// RecoveryFile is written beside the log of a session the sidecar never
// finalized (it crashed or was killed), when it next starts. The log itself
// is left as it was: it is evidence, and its tail may be a torn line.
const RecoveryFile = "recovery.jsonl"

// TypeRecovery is the recovery file's first record.
const TypeRecovery = "recovery"

// ErrFinalized is returned by Recover for a session that needs no recovery.
var ErrFinalized = errors.New("integrity: session is finalized")

// Recover writes dir's recovery file: a continuation of the chain from the
// last record that checks out, saying what the log does not account for
// (the typescript bytes past its last data record, with their digest, and
// the files as found), signed. The session stays unfinalized; the record
// turns a silent cut into a stated one.
func Recover(dir string, signer gossh.Signer, now func() time.Time) (err error) {
	rep := Verify(dir, []gossh.PublicKey{signer.PublicKey()})
	if rep.Finalized {
		return ErrFinalized
	}
	// The sidecar vouches, at its restart, for the records it wrote before
	// the crash and had not signed yet: everything that chains.
	last := int64(rep.Records) - 1
	if last < 0 {
		return fmt.Errorf("integrity: %s: no record checks out; nothing to continue", dir)
	}
	head, err := lineHash(filepath.Join(dir, PTYDir, LogFile), last)
	if err != nil {
		return err
	}
	attrs := map[string]string{
		"reason":      "the sidecar restarted before this session was finalized",
		"last_record": strconv.FormatInt(last, 10),
	}
	if err := tailAttrs(dir, rep.ChainedOffset, attrs); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, PTYDir, RecoveryFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("integrity: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	w := &Writer{w: f, run: rep.RunID, sess: rep.SessionID, signer: signer, now: now,
		seq: uint64(last + 1), prev: head}
	if err := w.Append(TypeRecovery, attrs); err != nil {
		return err
	}
	if err := w.Checkpoint(nil); err != nil {
		return err
	}
	return f.Sync()
}

// lineHash returns the chain hash of record seq of the log.
func lineHash(path string, seq int64) (string, error) {
	lines, err := readLog(path)
	if err != nil {
		return "", err
	}
	if seq >= int64(len(lines)) {
		return "", fmt.Errorf("integrity: %s has no record %d", path, seq)
	}
	sum := sha256.Sum256(lines[seq].text)
	return hex.EncodeToString(sum[:]), nil
}

// tailAttrs describes the typescript bytes from off on, which no verified
// data record covers, and the sizes and digests of both transcript files.
func tailAttrs(dir string, off int64, into map[string]string) error {
	for _, f := range []struct{ name, size, sum string }{
		{TypescriptFile, AttrTSSize, AttrTSSHA256},
		{TimingFile, AttrTMSize, AttrTMSHA256},
	} {
		data, err := os.Open(filepath.Join(dir, PTYDir, f.name))
		if err != nil {
			return fmt.Errorf("integrity: %w", err)
		}
		whole, tail := sha256.New(), sha256.New()
		n, err := io.Copy(whole, data)
		if err == nil && f.name == TypescriptFile && off >= 0 && off <= n {
			var m int64
			m, err = io.Copy(tail, io.NewSectionReader(data, off, n-off))
			into["unaccounted_off"] = strconv.FormatInt(off, 10)
			into["unaccounted_len"] = strconv.FormatInt(m, 10)
			into["unaccounted_sha256"] = hex.EncodeToString(tail.Sum(nil))
		}
		data.Close()
		if err != nil {
			return fmt.Errorf("integrity: %w", err)
		}
		into[f.size] = strconv.FormatInt(n, 10)
		into[f.sum] = hex.EncodeToString(whole.Sum(nil))
	}
	return nil
}
