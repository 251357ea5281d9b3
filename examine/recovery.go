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

// Attributes of the recovery record that say which records no checkpoint
// covered before the crash: the restarted sidecar signs them with the
// rest, though anyone with write access to the volume could have appended
// them, so the record says which they were.
const (
	AttrLastSignedRecord = "last_signed_record" // seq of the last checkpoint, -1 for none
	AttrUnsignedRecords  = "unsigned_records"   // "first-last", or "none"
)

// ErrFinalized is returned by Recover for a session that needs no recovery.
var ErrFinalized = errors.New("integrity: session is finalized")

// Recover writes dir's recovery file: a continuation of the chain from the
// last record that checks out, saying what the log does not account for
// (the typescript bytes past its last data record, with their digest, and
// the files as found) and which records were unsigned before the crash,
// signed. The session stays unfinalized; the record turns a silent cut
// into a stated one. A session whose files are not regular files (a link,
// a named pipe) is refused, with an error naming the file, and left as
// found.
func Recover(dir string, signer gossh.Signer, now func() time.Time) (err error) {
	v := verify(dir, Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}})
	rep := v.rep
	if rep.Finalized {
		return ErrFinalized
	}
	// The sidecar vouches, at its restart, for the records it wrote before
	// the crash and had not signed yet: everything that chains.
	last := int64(rep.Records) - 1
	if last < 0 {
		return fmt.Errorf("integrity: %s: no record checks out; nothing to continue", dir)
	}
	attrs := map[string]string{
		"reason":             "the sidecar restarted before this session was finalized",
		"last_record":        strconv.FormatInt(last, 10),
		AttrLastSignedRecord: strconv.FormatInt(rep.LastVerifiedSeq, 10),
		AttrUnsignedRecords:  unsignedRange(rep),
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
		seq: uint64(last + 1), prev: v.lastHash}
	if err := w.Append(TypeRecovery, attrs); err != nil {
		return err
	}
	if err := w.Checkpoint(nil); err != nil {
		return err
	}
	return f.Sync()
}

// unsignedRange names the records that chain but follow the last trusted
// checkpoint, "first-last", or "none".
func unsignedRange(rep *Report) string {
	if rep.SignedRecords >= rep.Records {
		return "none"
	}
	return fmt.Sprintf("%d-%d", rep.SignedRecords, rep.Records-1)
}

// tailAttrs describes the typescript bytes from off on, which no verified
// data record covers, and the sizes and digests of both transcript files
// as they were when opened (regular files only, read no further).
func tailAttrs(dir string, off int64, into map[string]string) error {
	for _, f := range []struct{ name, size, sum string }{
		{TypescriptFile, AttrTSSize, AttrTSSHA256},
		{TimingFile, AttrTMSize, AttrTMSHA256},
	} {
		data, n, err := OpenRegular(dir, PTYDir+"/"+f.name)
		if err != nil {
			return fmt.Errorf("integrity: %s: %w", dir, err)
		}
		whole := sha256.New()
		_, err = io.Copy(whole, io.NewSectionReader(data, 0, n))
		if err == nil && f.name == TypescriptFile && off >= 0 && off <= n {
			tail := sha256.New()
			var m int64
			m, err = io.Copy(tail, io.NewSectionReader(data, off, n-off))
			into["unaccounted_off"] = strconv.FormatInt(off, 10)
			into["unaccounted_len"] = strconv.FormatInt(m, 10)
			into["unaccounted_sha256"] = hex.EncodeToString(tail.Sum(nil))
		}
		data.Close()
		if err != nil {
			return fmt.Errorf("integrity: %s: %w", dir, err)
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
	var lines []logLine
	err := readRecords(v.rep.Dir, RecoveryFile, func(_ int, ln logLine) bool {
		lines = append(lines, ln)
		return len(lines) <= 2
	})
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		v.anomaly(RecoveryFile, -1, -1, "%v", err)
		return
	}
	if len(lines) != 2 || !lines[0].complete || !lines[1].complete {
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
	if err != nil {
		v.anomaly(RecoveryFile, seq+1, lines[1].off, "recovery checkpoint signature: %v", err)
		return
	}
	if why := v.untrusted(pub); why != "" {
		v.anomaly(RecoveryFile, seq+1, lines[1].off, "recovery checkpoint %s", why)
		return
	}
	v.anomaly(RecoveryFile, seq, 0, "the sidecar restarted on %s before finalizing; %s typescript bytes from offset %s are not covered by the log (sha256 %s); %s",
		rec.Time.Format(time.RFC3339), rec.Attrs["unaccounted_len"], rec.Attrs["unaccounted_off"], rec.Attrs["unaccounted_sha256"],
		v.unsignedStatement(rec.Attrs[AttrUnsignedRecords]))
}

// unsignedStatement says which records the recovery signed without any
// checkpoint having covered them before the crash, checked against what
// the verifier found itself.
func (v *verifier) unsignedStatement(claimed string) string {
	found := unsignedRange(v.rep)
	switch {
	case claimed == "":
		return fmt.Sprintf("the recovery record does not say which records were unsigned before the crash (the log shows %s)", found)
	case claimed != found:
		return fmt.Sprintf("the recovery record says records %s were unsigned before the crash, but the log shows %s", claimed, found)
	case found == "none":
		return "every record was signed before the crash"
	}
	return fmt.Sprintf("records %s were not signed before the crash: the restarted sidecar signed them as found, and anyone with write access to the volume could have appended them", found)
}
