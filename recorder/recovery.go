package recorder

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/sessionkey"
)

// errFinalized is recoverIn's error for a session that needs no recovery.
var errFinalized = errors.New("recorder: session is finalized")

// recoveryOpened, when set (by tests), runs once a session's folders are
// open and before anything in them is read: a test swaps the pty folder
// for a link there, deterministically, to prove the fds are used.
var recoveryOpened func(dir string)

// recoverIn writes the recovery file (vocab.RecoveryFile, beside the log of
// a session the sidecar never finalized): a continuation of the chain from
// the last record that checks out, saying what the log does not account
// for (the typescript bytes past its last data record, with their digest,
// and the files as found) and which records were unsigned before the
// crash, signed. The log itself is left as it was: it is evidence, and its
// tail may be a torn line. The session stays unfinalized; the record turns
// a silent cut into a stated one. It finds the cut with the session
// verifier (package evidence), so a session whose files are not regular
// files (a link, a named pipe) is refused, with an error naming the file,
// and left as found. The run, session and pty folders are d's, opened once
// without following a link (RecoverSessions opens them), and everything is
// read and written relative to them.
//
// The statement is signed by the session's own key where it had one and
// the key is still there (recoverySigner), else by the host key, and says
// so. It returns what sealed the session: the recovery record's
// attributes (where they announce the manifest, vocab.AttrManifest, the
// caller writes it, with the files' digests they state), and the signer,
// which the caller destroys if it is the session's own key.
func recoverIn(d *sessionDirs, opts Options, now func() time.Time) (_ *recoverySeal, err error) {
	if recoveryOpened != nil {
		recoveryOpened(d.path)
	}
	dir := d.path
	rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{opts.Signer.PublicKey()}}, evidence.Options{PTY: d.pty})
	if rep.Finalized {
		return nil, errFinalized
	}
	signer, key, fallback, why := recoverySigner(rep, opts)
	seal := &recoverySeal{signer: signer, key: key, keyErr: why}
	defer func() {
		if err != nil {
			// Not sealed: the key stays for the next start's try.
			seal.release()
		}
	}()
	if key != nil {
		// The cut is found again trusting the CA that certified the
		// session's own key, which signed its checkpoints: how far they
		// vouch bounds what the recovery reads (the first pass named the
		// key). Trust here decides nothing an examiner relies on: the
		// examiner's verify holds the CA to the one they give.
		cert := key.PublicKey().(*gossh.Certificate)
		rep = evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{opts.Signer.PublicKey()},
			Authorities: []evidence.Authority{{Key: cert.SignatureKey, Principals: cert.ValidPrincipals}}}, evidence.Options{PTY: d.pty})
	}
	// The sidecar vouches, at its restart, for the records it wrote before
	// the crash and had not signed yet: everything that chains.
	last := int64(rep.Records) - 1
	if last < 0 {
		return nil, fmt.Errorf("recorder: recover %s: no record checks out; nothing to continue", dir)
	}
	attrs := map[string]string{
		vocab.AttrReason:           "the sidecar restarted before this session was finalized",
		vocab.AttrLastRecord:       strconv.FormatInt(last, 10),
		vocab.AttrLastSignedRecord: strconv.FormatInt(rep.LastVerifiedSeq, 10),
		vocab.AttrUnsignedRecords:  rep.UnsignedRange(),
	}
	if err := tailAttrs(d, rep, attrs); err != nil {
		return nil, err
	}
	// The recovery seals the session, and its manifest follows, except
	// where a transcript file was too large to read: the manifest could
	// not state its digest either.
	if attrs[vocab.AttrNotRead] == "" {
		attrs[vocab.AttrManifest] = vocab.ManifestFile
	}
	if fallback != "" {
		attrs[vocab.AttrSignerFallback] = fallback
	}
	// A line the crash cut mid-write is left as it is and stated, so
	// that verify can hold the log's end to what the sidecar found.
	if t := rep.TornLog; t != nil {
		attrs[vocab.AttrLogTornOff] = strconv.FormatInt(t.Off, 10)
		attrs[vocab.AttrLogTornLen] = strconv.FormatInt(t.Len, 10)
		attrs[vocab.AttrLogTornSHA256] = t.SHA256
	}
	// The record and its checkpoint are made in memory and the file gets
	// its name only with both in it (createWhole): its name alone tells
	// the next start the session was recovered, so a crash mid-recovery
	// must leave no file, never a torn one that no start would replace
	// and verify would call tampered. Never through a link, never over
	// an existing file.
	var statement bytes.Buffer
	w := integrity.ContinueWriter(&statement, rep.RunID, rep.SessionID, signer, now, uint64(last+1), rep.ChainHead)
	if err := w.Append(vocab.TypeRecovery, attrs); err != nil {
		return nil, err
	}
	if err := w.Checkpoint(nil); err != nil {
		return nil, err
	}
	if err := d.createWhole(vocab.RecoveryFile, statement.Bytes()); err != nil {
		return nil, fmt.Errorf("recorder: recover %s: %w", dir, err)
	}
	seal.attrs = attrs
	return seal, nil
}

// recoverySeal is what a recovery sealed a session with: the recovery
// record's attributes and the signer of its checkpoint, which signs the
// manifest too; key is the session's own key when that signer is it,
// keyErr why the host key signs when the session had a key of its own.
type recoverySeal struct {
	attrs  map[string]string
	signer gossh.Signer
	key    *sessionkey.Key
	keyErr error
}

// release ends the session's own key's signer and leaves its file, for a
// recovery that did not seal the session.
func (r *recoverySeal) release() {
	if r.key != nil {
		r.key.Release()
		r.key = nil
	}
}

// destroy destroys the session's own key, if it signed.
func (r *recoverySeal) destroy() error {
	if r.key == nil {
		return nil
	}
	err := r.key.Destroy()
	r.key = nil
	return err
}

// recoveredDigests are the transcript files' digests a recovery record
// states, which it read the files whole for, by their path in the session
// folder: the manifest takes them rather than read the files again.
func recoveredDigests(attrs map[string]string) map[string]string {
	return transcriptDigests(attrs[vocab.AttrTSSHA256], attrs[vocab.AttrTMSHA256])
}

// tailAttrs describes the typescript bytes from off on, which no verified
// data record covers, and the sizes and digests of both transcript files
// as they were when opened (regular files only, read no further). A file
// that extends past the size the last trusted checkpoint states (rep) by
// more than the sidecar writes unsigned (evidence.MaxUnsignedTail) is not
// read: its size is stated and the excess is named (vocab.AttrNotRead),
// so a forger's sparse terabytes cost nothing.
func tailAttrs(d *sessionDirs, rep *evidence.Report, into map[string]string) error {
	dir := d.path
	var notRead []string
	for _, f := range []struct {
		name, size, sum string
		signed, bound   int64
	}{
		{vocab.TypescriptFile, vocab.AttrTSSize, vocab.AttrTSSHA256, rep.SignedTSSize, evidence.MaxUnsignedTail},
		{vocab.TimingFile, vocab.AttrTMSize, vocab.AttrTMSHA256, rep.SignedTMSize, evidence.MaxUnsignedTimingTail},
	} {
		data, n, err := safefs.OpenRegularIn(d.pty, f.name)
		if err != nil {
			return fmt.Errorf("recorder: recover %s: %w", dir, err)
		}
		into[f.size] = strconv.FormatInt(n, 10)
		if n-f.signed > f.bound {
			data.Close()
			notRead = append(notRead, f.name+": "+evidence.UnsignedTailMessage(n, f.signed, f.bound))
			continue
		}
		err = digestForRecovery(data, n, f.name == vocab.TypescriptFile, rep.ChainedOffset, f.sum, into)
		data.Close()
		if err != nil {
			return fmt.Errorf("recorder: recover %s: %s: %w", dir, f.name, err)
		}
	}
	if len(notRead) > 0 {
		into[vocab.AttrNotRead] = strings.Join(notRead, "; ")
	}
	return nil
}

// digestForRecovery puts the digest of data's n bytes under sumAttr and, for the
// typescript, the length and digest of the bytes from off on (which no
// verified data record covers).
func digestForRecovery(data io.ReaderAt, n int64, typescript bool, off int64, sumAttr string, into map[string]string) error {
	whole := sha256.New()
	if _, err := io.Copy(whole, io.NewSectionReader(data, 0, n)); err != nil {
		return err
	}
	into[sumAttr] = hex.EncodeToString(whole.Sum(nil))
	if !typescript || off < 0 || off > n {
		return nil
	}
	tail := sha256.New()
	m, err := io.Copy(tail, io.NewSectionReader(data, off, n-off))
	into[vocab.AttrUnaccountedOff] = strconv.FormatInt(off, 10)
	into[vocab.AttrUnaccountedLen] = strconv.FormatInt(m, 10)
	into[vocab.AttrUnaccountedSHA256] = hex.EncodeToString(tail.Sum(nil))
	return err
}
