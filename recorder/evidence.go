package recorder

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/diskstate"
	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/internal/wholewrite"
	"github.com/aptl/aptl-kali-capture/internal/witnessbudget"
	"github.com/aptl/aptl-kali-capture/internal/writeback"
	"github.com/aptl/aptl-kali-capture/ship"
)

// The record's evidence side: the integrity log (package integrity) that
// the recorder writes in step with the transcript, and the durability and
// checkpoint schedule.

// SyncMode says when recorded bytes become durable.
type SyncMode int

const (
	// SyncInterval, the default, fsyncs the transcript and the log at most
	// syncInterval after a byte was recorded, and every syncBytes. The
	// fsync runs beside the copiers (syncer.go), so a host crash can lose
	// up to that second or 2×syncBytes, and the log then ends unfinalized.
	SyncInterval SyncMode = iota
	// SyncStrict signs and fsyncs every chunk before the broker delivers
	// it: a byte the client saw is on disk under a signed head. It costs an
	// fsync per chunk (see BenchmarkOutput/strict).
	SyncStrict
)

// String names the mode as the configuration spells it.
func (m SyncMode) String() string {
	if m == SyncStrict {
		return "strict"
	}
	return "interval"
}

// The bounded durability window, and the checkpoint schedule: the timer's
// sync (and, in strict mode, every chunk's) signs the head when records
// were added since the last signature, so evidence is signed within
// syncInterval of being recorded, and at least every checkpointBytes.
// Records the sidecar wrote but has not signed yet are, to a verifier,
// indistinguishable from records anyone with write access appended.
const (
	syncInterval    = time.Second
	syncBytes       = 1 << 20
	checkpointBytes = 16 << 20
)

// Options are the recorder settings shared by every session.
type Options struct {
	// Signer signs checkpoints: the sidecar's host key.
	Signer gossh.Signer
	// SessionKeys, when set, gives each session a signing key of its own
	// (package sessionkey), which signs its checkpoints and manifest in
	// Signer's stead and is destroyed when the session is sealed (Close,
	// or the recovery of a session a crash cut).
	SessionKeys KeySource
	// HostKeyFallback: with SessionKeys, a session the pool has no key
	// for is signed by Signer, and its open record says why
	// (vocab.AttrSignerFallback); without it, such a session is refused
	// (ErrNoSessionKey).
	HostKeyFallback bool
	// Sync is when recorded bytes become durable (and signed).
	Sync SyncMode
	// MaxBytes caps the bytes stored in a transcript (0: no cap). Past it,
	// data is still digested and counted in the log, not stored.
	MaxBytes int64
	// OnSizeLimit, if set, is called once, when the transcript reaches
	// MaxBytes, with the cap: the broker logs a warning then, not only at
	// close. It runs in the goroutine that recorded the bytes, after the
	// session's lock is released, and must not block.
	OnSizeLimit func(limit int64)
	// Witnesses are the evidence sources bound into each session's chain
	// beside the terminal (witness.go); nil records the terminal only.
	Witnesses []WitnessSource
	// Disk is the capture volume's state (disk.go): a critical volume
	// refuses new sessions, every transition is a disk record in each
	// open session's chain, and a low one stops the witnesses. nil: no
	// disk states.
	Disk *diskstate.Monitor
	// Budget bounds the witnesses' files across sessions (disk.go); nil:
	// each session's own bound only.
	Budget *witnessbudget.Budget
	// Shipper, when set, ships each session's files off the box while
	// it runs (ship.go, package ship); nil: the local volume only.
	Shipper *ship.Shipper
}

// digestFile is a record file that keeps the size and SHA-256 of what was
// written to it, so checkpoints and the close record vouch for the files
// without reading them back.
//
// Write to it only with Write and writeWhole: the embedded *os.File's
// other writers (WriteString, WriteAt, ReadFrom) would bypass the digest.
type digestFile struct {
	*os.File
	sum  hash.Hash
	size int64
}

func newDigestFile(f *os.File) *digestFile { return &digestFile{File: f, sum: sha256.New()} }

func (f *digestFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.sum.Write(p[:n])
	f.size += int64(n)
	return n, err
}

// writeWhole writes p whole or not at all (package wholewrite): the
// timing file's lines and the typescript's header and done line, which
// readers parse as units. Typescript data is written with Write: a short
// write's bytes are recorded as stored, the rest as a gap.
func (f *digestFile) writeWhole(p []byte) error {
	torn, err := wholewrite.Write(f.File, p)
	if err == nil {
		torn = len(p)
	}
	f.sum.Write(p[:torn])
	f.size += int64(torn)
	return err
}

// attrs returns the file's size and digest so far under the given names.
func (f *digestFile) attrs(into map[string]string, sizeName, sumName string) {
	into[sizeName] = strconv.FormatInt(f.size, 10)
	into[sumName] = hex.EncodeToString(f.sum.Sum(nil))
}

func (s *Session) fileAttrs() map[string]string {
	a := map[string]string{}
	s.ts.attrs(a, vocab.AttrTSSize, vocab.AttrTSSHA256)
	s.tm.attrs(a, vocab.AttrTMSize, vocab.AttrTMSHA256)
	return a
}

// openAttrs are the open record's: the ids, the format, where the data
// starts in the typescript, the terminal, every provenance header, and
// what signs the session.
func openAttrs(m Meta, headerLen int, headerSum string, opts Options, signer gossh.Signer, fallback string) map[string]string {
	a := map[string]string{
		vocab.AttrFormat:    vocab.Format,
		vocab.AttrRunID:     m.RunID,
		vocab.AttrSessionID: m.SessionID,
		vocab.AttrHeaderLen: strconv.Itoa(headerLen),
		vocab.AttrHeaderSum: headerSum,
		vocab.AttrCommand:   m.Command,
		"term":              m.Term,
		"tty":               m.TTY,
		"cols":              strconv.Itoa(m.Cols),
		"rows":              strconv.Itoa(m.Rows),
		"sync":              opts.Sync.String(),
		"max_bytes":         strconv.FormatInt(opts.MaxBytes, 10),
	}
	for _, h := range m.Headers {
		a[h.Name] = h.Value
	}
	maps.Copy(a, signerAttrs(signer))
	if fallback != "" {
		a[vocab.AttrSignerFallback] = fallback
	}
	return withExactValues(a)
}

// signerAttrs say what signs the session: its own certified key, whose
// certificate the open record, the session's first, then carries; or the
// host key. A session key's certificate is what the signer presents
// (gossh.NewCertSigner), so it is in every signature too.
func signerAttrs(signer gossh.Signer) map[string]string {
	cert, ok := signer.PublicKey().(*gossh.Certificate)
	if !ok {
		return map[string]string{vocab.AttrSigner: vocab.SignerHostKey}
	}
	return map[string]string{
		vocab.AttrSigner:       vocab.SignerSessionKey,
		vocab.AttrSignerCert:   strings.TrimSuffix(string(gossh.MarshalAuthorizedKey(cert)), "\n"),
		vocab.AttrSignerSerial: strconv.FormatUint(cert.Serial, 10),
	}
}

// dirtied notes that n bytes (or an event, n 0) were recorded and makes
// them durable on the configured schedule. Callers hold mu.
func (s *Session) dirtied(n int) error {
	s.unsynced += int64(n)
	s.sinceCheckpoint += int64(n)
	// Strict: each chunk is signed and durable before the broker delivers it.
	if s.opts.Sync == SyncStrict {
		return s.checkpointAndSync()
	}
	if s.sinceCheckpoint >= checkpointBytes {
		if err := s.checkpointLocked(); err != nil {
			return err
		}
	}
	if err := s.reapSync(false); err != nil {
		return err
	}
	if s.unsynced >= syncBytes {
		if err := s.startSync(); err != nil {
			return err
		}
	}
	s.armTick()
	return nil
}

// armTick makes sure an onTick is pending. Callers hold mu.
func (s *Session) armTick() {
	if s.tick == nil && !s.closed {
		s.tick = time.AfterFunc(syncInterval, s.onTick)
	}
}

// onTick bounds the durability window in time, and writes a checkpoint when
// one is due.
func (s *Session) onTick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick = nil
	if s.closed || s.err != nil {
		return
	}
	// Coalesced window changes are recorded within syncInterval even when
	// nothing else happens.
	if s.recordResizes() != nil {
		return
	}
	if s.signable() {
		if s.checkpointLocked() != nil {
			return
		}
	}
	// The timer's fsync, too, runs beside the copiers. It always starts
	// (after one still running): the records just written, the checkpoint
	// among them, may postdate the running one.
	s.startSync()
}

// checkpointAndSync signs the head if anything was recorded since the last
// signature, then makes all three files durable.
func (s *Session) checkpointAndSync() error {
	if s.signable() {
		if err := s.checkpointLocked(); err != nil {
			return err
		}
	}
	return s.syncLocked()
}

// syncLocked writes pending log records and fsyncs all three files, after
// any fsync still running beside the copiers. Callers hold mu.
func (s *Session) syncLocked() error {
	if err := s.reapSync(true); err != nil {
		return err
	}
	if err := s.chain.Flush(); err != nil {
		return s.fail(err)
	}
	if err := s.fail(syncFiles(s.recordFiles())); err != nil {
		return err
	}
	s.unsynced = 0
	return nil
}

// recordFiles are the three files every fsync covers.
func (s *Session) recordFiles() []*os.File { return []*os.File{s.ts.File, s.tm.File, s.log} }

// syncFiles fsyncs files concurrently: on ext4 concurrent fsyncs share a
// journal commit, and measured here three together took about 0.6 ms
// against 0.8 ms one after another, which is most of strict mode's cost
// per chunk. Each file's pages written before its fsync then leave the
// page cache (package writeback says why).
func syncFiles(files []*os.File) error {
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files[1:] {
		wg.Go(func() { errs[i+1] = writeback.Sync(f) })
	}
	errs[0] = writeback.Sync(files[0])
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("recorder: fsync: %w", err)
	}
	return nil
}

func (s *Session) checkpointLocked() error {
	a := s.fileAttrs()
	// A witness's records go in before the signature, which then covers them.
	if err := s.witnessCheckpoint(a); err != nil {
		return s.fail(err)
	}
	if err := s.chain.Checkpoint(a); err != nil {
		return s.fail(err)
	}
	s.sinceCheckpoint, s.checkpointSeq, s.shippedUnsigned = 0, s.chain.Seq(), 0
	return s.fail(s.shipPoint())
}

// closeEvidence writes the close record and the final signed checkpoint.
// It runs even after a write failure, so the log says how the record ended.
func (s *Session) closeEvidence(exitCode int, extra []Header, failure error) error {
	a := s.fileAttrs()
	// The witnesses' last records (finished files, gaps) precede the close
	// record, which carries their totals.
	s.closeWitnesses(a)
	a[vocab.AttrExitCode] = strconv.Itoa(exitCode)
	for _, stream := range []string{vocab.StreamIn, vocab.StreamOut, vocab.StreamErr} {
		a[vocab.AttrCloseBytes+stream] = strconv.FormatInt(s.counted[stream], 10)
	}
	for _, h := range extra {
		a[h.Name] = h.Value
	}
	if failure != nil {
		a["write_error"] = failure.Error()
	}
	// Once this record and its checkpoint are written, the session is
	// sealed and its manifest follows (manifest.go).
	a[vocab.AttrManifest] = vocab.ManifestFile
	// The close record is made even when the log cannot take it yet; on
	// the reserve's room it is written with those held back before it.
	err := s.chain.Append(vocab.TypeClose, withExactValues(a))
	if err != nil && s.drawOnReserve() {
		err = s.chain.Flush()
	}
	if err == nil {
		err = s.chain.Checkpoint(s.fileAttrs())
	}
	s.sealed = err == nil
	return err
}

// recordedDigests are the digests of the files the recorder wrote whole
// and hashed as it wrote them, by their path in the session folder: the
// manifest takes them rather than read the transcript back.
func (s *Session) recordedDigests() map[string]string {
	return transcriptDigests(hex.EncodeToString(s.ts.sum.Sum(nil)), hex.EncodeToString(s.tm.sum.Sum(nil)))
}

// storable splits p at the size cap: what may still be stored, and the rest,
// which is only counted. The first time the cap is reached the timing file
// says so too. Callers hold mu.
func (s *Session) storable(p []byte) (stored, rest []byte) {
	if s.opts.MaxBytes <= 0 {
		return p, nil
	}
	room := max(s.opts.MaxBytes-s.stored, 0)
	if int64(len(p)) <= room {
		return p, nil
	}
	if !s.capped {
		s.capped = true
		s.fail(s.writeTiming(scriptfmt.AppendHeaders(nil, []Header{{Name: vocab.HeaderSizeLimit, Value: "reached at " + strconv.FormatInt(s.opts.MaxBytes, 10) + " bytes; later data is counted and digested in the integrity log, not stored"}})))
	}
	return p[:room], p[room:]
}

var errNoSigner = errors.New("recorder: no signer for checkpoints")

// withExactValues makes every value of a valid UTF-8 for display (invalid
// bytes become U+FFFD) and adds name+vocab.AttrExactSuffix with the exact bytes
// beside each one it changed. It returns a.
func withExactValues(a map[string]string) map[string]string {
	var invalid []string
	for k, v := range a {
		if !utf8.ValidString(v) {
			invalid = append(invalid, k)
		}
	}
	for _, k := range invalid {
		a[k+vocab.AttrExactSuffix] = base64.StdEncoding.EncodeToString([]byte(a[k]))
		a[k] = strings.ToValidUTF8(a[k], "\uFFFD")
	}
	return a
}
