package integrity

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// checkRecovery reads the recovery file a restarted sidecar wrote for this
// unfinalized session, if any, and reports what it states. It must continue
// the chain from the last record that checks out and carry a trusted
// signature; the session stays unfinalized either way.
func (v *verifier) checkRecovery() {
	lines, err := readLog(filepath.Join(v.rep.Dir, PTYDir, RecoveryFile))
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil || len(lines) != 2 || !lines[0].complete || !lines[1].complete {
		v.anomaly(RecoveryFile, -1, -1, "recovery file is not one recovery record and one checkpoint")
		return
	}
	var rec, cp Record
	if json.Unmarshal(lines[0].text, &rec) != nil || json.Unmarshal(lines[1].text, &cp) != nil {
		v.anomaly(RecoveryFile, -1, -1, "recovery file does not parse")
		return
	}
	seq := int64(v.rep.Records)
	sum := sha256.Sum256(lines[0].text)
	switch {
	case rec.Type != TypeRecovery || rec.Seq != uint64(seq) || rec.Prev != v.lastHash:
		v.anomaly(RecoveryFile, seq, 0, "recovery record does not continue the chain after record %d", seq-1)
		return
	case cp.Type != TypeCheckpoint || cp.Prev != hex.EncodeToString(sum[:]):
		v.anomaly(RecoveryFile, seq+1, lines[1].off, "recovery checkpoint does not follow the recovery record")
		return
	}
	pub, err := VerifySSHSIG(cp.Sig, HeadNamespace, HeadMessage(v.rep.RunID, v.rep.SessionID, rec.Seq, cp.Prev))
	if err != nil || !v.isTrusted(pub) {
		v.anomaly(RecoveryFile, seq+1, lines[1].off, "recovery checkpoint is not signed by a trusted key")
		return
	}
	v.anomaly(RecoveryFile, seq, 0, "the sidecar restarted on %s before finalizing; %s typescript bytes from offset %s are not covered by the log (sha256 %s)",
		rec.Time.Format(time.RFC3339), rec.Attrs["unaccounted_len"], rec.Attrs["unaccounted_off"], rec.Attrs["unaccounted_sha256"])
}
