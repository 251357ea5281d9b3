package recorder

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

	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// ErrFinalized is returned by Recover for a session that needs no recovery.
var ErrFinalized = errors.New("recorder: session is finalized")

// Recover writes dir's recovery file (vocab.RecoveryFile, beside the log of
// a session the sidecar never finalized): a continuation of the chain from
// the last record that checks out, saying what the log does not account
// for (the typescript bytes past its last data record, with their digest,
// and the files as found) and which records were unsigned before the
// crash, signed. The log itself is left as it was: it is evidence, and its
// tail may be a torn line. The session stays unfinalized; the record turns
// a silent cut into a stated one. It finds the cut with the examiner, so a
// session whose files are not regular files (a link, a named pipe) is
// refused, with an error naming the file, and left as found.
func Recover(dir string, signer gossh.Signer, now func() time.Time) (err error) {
	rep := examine.VerifyKeys(dir, examine.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}})
	if rep.Finalized {
		return ErrFinalized
	}
	// The sidecar vouches, at its restart, for the records it wrote before
	// the crash and had not signed yet: everything that chains.
	last := int64(rep.Records) - 1
	if last < 0 {
		return fmt.Errorf("recorder: recover %s: no record checks out; nothing to continue", dir)
	}
	attrs := map[string]string{
		vocab.AttrReason:             "the sidecar restarted before this session was finalized",
		"last_record":                strconv.FormatInt(last, 10),
		examine.AttrLastSignedRecord: strconv.FormatInt(rep.LastVerifiedSeq, 10),
		examine.AttrUnsignedRecords:  rep.UnsignedRange(),
	}
	if err := tailAttrs(dir, rep.ChainedOffset, attrs); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, vocab.PTYDir, vocab.RecoveryFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("recorder: recover: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	w := integrity.ContinueWriter(f, rep.RunID, rep.SessionID, signer, now, uint64(last+1), rep.ChainHead)
	if err := w.Append(vocab.TypeRecovery, attrs); err != nil {
		return err
	}
	if err := w.Checkpoint(nil); err != nil {
		return err
	}
	return f.Sync()
}

// tailAttrs describes the typescript bytes from off on, which no verified
// data record covers, and the sizes and digests of both transcript files
// as they were when opened (regular files only, read no further).
func tailAttrs(dir string, off int64, into map[string]string) error {
	for _, f := range []struct{ name, size, sum string }{
		{vocab.TypescriptFile, vocab.AttrTSSize, vocab.AttrTSSHA256},
		{vocab.TimingFile, vocab.AttrTMSize, vocab.AttrTMSHA256},
	} {
		data, n, err := examine.OpenRegular(dir, vocab.PTYDir+"/"+f.name)
		if err != nil {
			return fmt.Errorf("recorder: recover %s: %w", dir, err)
		}
		whole := sha256.New()
		_, err = io.Copy(whole, io.NewSectionReader(data, 0, n))
		if err == nil && f.name == vocab.TypescriptFile && off >= 0 && off <= n {
			tail := sha256.New()
			var m int64
			m, err = io.Copy(tail, io.NewSectionReader(data, off, n-off))
			into["unaccounted_off"] = strconv.FormatInt(off, 10)
			into["unaccounted_len"] = strconv.FormatInt(m, 10)
			into["unaccounted_sha256"] = hex.EncodeToString(tail.Sum(nil))
		}
		data.Close()
		if err != nil {
			return fmt.Errorf("recorder: recover %s: %w", dir, err)
		}
		into[f.size] = strconv.FormatInt(n, 10)
		into[f.sum] = hex.EncodeToString(whole.Sum(nil))
	}
	return nil
}
