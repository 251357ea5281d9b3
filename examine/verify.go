// Package examine reads a capture folder back, as an examiner does, and
// treats every file in it as hostile: it verifies a session's hash chain,
// signatures, data digests and timing totals (Verify), reconciles a
// harvested run with the tool server's tee (VerifyRun), exports a session
// for asciinema or ssh-keygen, and opens files without following links.
// It writes nothing into a capture folder, and it builds on every OS an
// examiner's laptop runs.
package examine

import (
	"bytes"
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

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Anomaly is one failed check, located as precisely as the evidence allows.
type Anomaly struct {
	File   string `json:"file"`
	Seq    int64  `json:"record"` // -1 when no record is concerned
	Offset int64  `json:"offset"` // byte offset in File; -1 when unknown
	Msg    string `json:"msg"`
}

// String is the anomaly as the verify command prints it.
func (a Anomaly) String() string {
	s := a.File
	if a.Seq >= 0 {
		s += " record " + strconv.FormatInt(a.Seq, 10)
	}
	if a.Offset >= 0 {
		s += " offset " + strconv.FormatInt(a.Offset, 10)
	}
	return s + ": " + a.Msg
}

// Report is the verdict on one session directory.
type Report struct {
	Dir       string    `json:"dir"`
	RunID     string    `json:"run_id,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	Started   time.Time `json:"started"` // the open record's time
	// Records is how many records chain correctly from the start;
	// SignedRecords how many of those a trusted signature covers.
	Records       int `json:"records"`
	SignedRecords int `json:"signed_records"`
	// Finalized: a close record followed by a trusted final checkpoint.
	Finalized bool `json:"finalized"`
	// Signed counts the checkpoints whose signature verified.
	Signed    int       `json:"signed_checkpoints"`
	Bytes     Totals    `json:"bytes"`          // per stream, as the verified records count them
	Gaps      []Gap     `json:"gaps,omitempty"` // data the log says was lost or not stored
	Anomalies []Anomaly `json:"anomalies"`      // every failed check; none means OK if Finalized
	// LastVerifiedSeq and LastVerifiedOffset say how far the evidence is
	// vouched for by a trusted signature: for an unfinalized session, what
	// is trustworthy. Records after it chain, but anyone with write access
	// could have written them.
	LastVerifiedSeq    int64 `json:"last_verified_record"`
	LastVerifiedOffset int64 `json:"last_verified_ts_offset"`
	// ChainedOffset is the typescript offset the chained records reach.
	ChainedOffset int64 `json:"chained_ts_offset"`
	// Pcap is the packet capture's state and files (pcap.go); nil when
	// the session predates it.
	Pcap *PcapReport `json:"pcap,omitempty"`
	// AuditSession is the session's kernel audit session (auditsession.go);
	// nil when the log has no audit-session record.
	AuditSession *AuditSessionReport `json:"audit_session,omitempty"`
	// ChainHead is the hash of the last record that chains, which a
	// recovery record continues from; not part of the printed report.
	ChainHead string `json:"-"`
	// SignedTSSize and SignedTMSize are the typescript and timing sizes
	// the last trusted checkpoint states (0 before any): what lies past
	// them is bounded (MaxUnsignedTail), for the recovery.
	SignedTSSize, SignedTMSize int64 `json:"-"`
}

// Gap is data the log says was not stored, or not timed, and why.
type Gap struct {
	Seq    int64  `json:"record"`
	Reason string `json:"reason"`
	Stream string `json:"stream"`
	Len    int64  `json:"len"`
	Count  int64  `json:"count,omitempty"` // packets, for the pcap stream
}

// Totals are bytes per stream: recorded in the chain, and stored in the typescript.
type Totals struct {
	In, Out, Err int64
	Stored       int64
}

// OK reports whether every check passed and the session was finalized.
func (r *Report) OK() bool { return r.Finalized && len(r.Anomalies) == 0 }

// verifier holds one session's state while its log is replayed.
type verifier struct {
	rep       *Report
	keys      Keys
	files     sessionFiles
	ts, tm    *os.File
	tsSize    int64
	tmSize    int64
	headerLen int64
	next      int64 // typescript offset the next stored data must start at
	closeRec  *integrity.Record
	closeSeq  int64
	// untimed counts stored bytes whose timing entry could not be written
	// (gap records with reason timing-write-failed).
	untimed int64
	// tsGood and tmGood are the file prefixes a checkpoint vouched for,
	// the start of any damage found at a later one.
	tsGood, tmGood int64
	// pcap and pcapGaps collect the claims about pcap files (pcap.go).
	pcap     pcapEvidence
	pcapGaps []Gap
}

// Verify checks the session in dir against keys the examiner trusts (the
// sidecar's host public key).
func Verify(dir string, trusted []gossh.PublicKey) *Report {
	return VerifyKeys(dir, Keys{Trusted: trusted})
}

// VerifyKeys checks the session in dir against the examiner's trusted and
// revoked keys: a checkpoint signed by a revoked key ends trust in the
// chain, even when the key is also listed as trusted.
func VerifyKeys(dir string, keys Keys) *Report { return verify(sessionFiles{dir: dir}, keys).rep }

// VerifyIn is VerifyKeys for the session in dir whose pty folder the
// caller has opened (pty): every file is read relative to that folder,
// never looked up by path again, so a folder swapped for a link meanwhile
// is not followed. The startup recovery reads through it.
func VerifyIn(dir string, pty *os.File, keys Keys) *Report {
	return verify(sessionFiles{dir: dir, pty: pty}, keys).rep
}

func verify(files sessionFiles, keys Keys) (v *verifier) {
	rep := &Report{Dir: files.dir, LastVerifiedSeq: -1, LastVerifiedOffset: -1, ChainedOffset: -1}
	v = &verifier{rep: rep, keys: keys, files: files, closeSeq: -1}
	defer func() {
		// A forged record must never take the verifier (and a whole run's
		// report) down with it.
		if p := recover(); p != nil {
			rep.Finalized = false
			v.anomaly(vocab.LogFile, rep.LastVerifiedSeq, -1, "verifier stopped on malformed evidence: %v", p)
		}
	}()
	if len(keys.Trusted) == 0 {
		v.anomaly("", -1, -1, "no trusted key given: signatures cannot be checked")
	}
	var err error
	if v.ts, v.tsSize, err = files.open(vocab.TypescriptFile); err != nil {
		v.anomaly(vocab.TypescriptFile, -1, -1, "%v", err)
	} else {
		defer v.ts.Close()
	}
	if v.tm, v.tmSize, err = files.open(vocab.TimingFile); err != nil {
		v.anomaly(vocab.TimingFile, -1, -1, "%v", err)
	} else {
		defer v.tm.Close()
	}
	lr, err := openLog(files, vocab.LogFile)
	if err != nil {
		v.anomaly(vocab.LogFile, -1, -1, "%v", err)
		return v
	}
	defer lr.Close()
	// The timing totals are compared with the chain's only when the whole
	// chain checked out: after a break they would restate the same damage.
	complete, nLines := v.replay(lr)
	timingReadable := v.checkUnsignedTails()
	if complete && timingReadable && v.ts != nil && v.tm != nil {
		v.checkTiming()
	}
	v.checkEnd(nLines)
	v.checkPcap()
	return v
}

func (v *verifier) anomaly(file string, seq, off int64, format string, args ...any) {
	v.rep.Anomalies = append(v.rep.Anomalies, Anomaly{File: file, Seq: seq, Offset: off, Msg: fmt.Sprintf(format, args...)})
}

// replay walks the chain. The first break (a record that does not parse,
// or whose seq or prev is wrong) is reported and ends trust in the records
// after it. It returns whether the whole log checked out, and how many
// lines it read (the breaking one included).
func (v *verifier) replay(lr *logReader) (complete bool, nLines int) {
	prev := ""
	for i := 0; ; i++ {
		ln, err := lr.next()
		switch {
		case err == io.EOF:
			return true, i
		case err != nil:
			v.anomaly(vocab.LogFile, int64(i), ln.off, "%v", err)
			return false, i + 1
		case !ln.complete:
			v.anomaly(vocab.LogFile, int64(i), ln.off, "truncated record (no newline)")
			return false, i + 1
		case !v.chains(int64(i), ln, &prev):
			return false, i + 1
		}
	}
}

// chains checks one complete log line, record seq, against the hash of
// the line before (prev), and on success advances prev and the report.
func (v *verifier) chains(seq int64, ln logLine, prev *string) bool {
	r, err := parseRecord(ln.text)
	if err != nil {
		v.anomaly(vocab.LogFile, seq, ln.off, "%v", err)
		return false
	}
	if seq == 0 {
		if !v.checkOpen(&r, ln.off) {
			return false
		}
		*prev = integrity.Seed(v.rep.RunID, v.rep.SessionID)
	}
	switch {
	case r.Seq != uint64(seq):
		v.anomaly(vocab.LogFile, seq, ln.off, "sequence %d where %d belongs (record removed, duplicated or reordered)", r.Seq, seq)
		return false
	case r.Prev != *prev:
		v.anomaly(vocab.LogFile, seq, ln.off, "previous-hash mismatch: the chain is broken before this record")
		return false
	case v.closeRec != nil && !(r.Type == vocab.TypeCheckpoint && seq == v.closeSeq+1):
		v.anomaly(vocab.LogFile, seq, ln.off, "record after the close")
		return false
	case !v.checkRecord(&r, seq, ln.off):
		return false
	}
	sum := sha256.Sum256(ln.text)
	*prev = hex.EncodeToString(sum[:])
	v.rep.ChainHead = *prev
	v.rep.Records = int(seq) + 1
	v.rep.ChainedOffset = v.next
	return true
}

// parseRecord decodes one log line and requires it to be exactly the
// line the writer would produce for that record: no trailing bytes, no
// duplicate or reordered keys, no extra whitespace. The last line is hashed
// by no later record, so only this keeps it from carrying additions.
func parseRecord(line []byte) (integrity.Record, error) {
	var r integrity.Record
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return integrity.Record{}, fmt.Errorf("record does not parse: %v", err)
	}
	canon, err := json.Marshal(r)
	if err != nil || !bytes.Equal(canon, line) {
		return integrity.Record{}, errors.New("record is not in the form the sidecar writes (bytes added or rearranged)")
	}
	return r, nil
}

func (v *verifier) checkOpen(r *integrity.Record, off int64) bool {
	if r.Type != vocab.TypeOpen || r.Seq != 0 {
		v.anomaly(vocab.LogFile, 0, off, "first record is not an open record")
		return false
	}
	v.rep.RunID, v.rep.SessionID, v.rep.Started = r.Attrs[vocab.AttrRunID], r.Attrs[vocab.AttrSessionID], r.Time
	if r.Attrs[vocab.AttrFormat] != vocab.Format {
		v.anomaly(vocab.LogFile, 0, off, "format %q, want %q", r.Attrs[vocab.AttrFormat], vocab.Format)
		return false
	}
	v.checkPlacement(off)
	n, err := strconv.ParseInt(r.Attrs[vocab.AttrHeaderLen], 10, 64)
	if err != nil || n <= 0 || n > maxHeaderLen {
		v.anomaly(vocab.LogFile, 0, off, "open record has no plausible typescript header length")
		return false
	}
	v.headerLen, v.next = n, n
	if v.ts != nil {
		v.checkHeaderLine(r.Attrs[vocab.AttrHeaderSum])
	}
	return true
}

// maxHeaderLen bounds the typescript header line the open record may claim.
const maxHeaderLen = 1 << 20

// checkPlacement compares the ids in the open record with where the files
// lie: <root>/<run_id>/<session_id>, or a harvest's kali-side/<session_id>.
// Files moved between sessions or runs verify as the session they are, so
// only their place betrays them.
func (v *verifier) checkPlacement(off int64) {
	dir := filepath.Clean(v.rep.Dir)
	if base := filepath.Base(dir); base != v.rep.SessionID {
		v.anomaly(vocab.LogFile, 0, off, "log is for session %q but lies in %q", v.rep.SessionID, base)
	}
	if parent := filepath.Base(filepath.Dir(dir)); parent != v.rep.RunID && parent != kaliSideDir {
		v.anomaly(vocab.LogFile, 0, off, "log is for run %q but lies under %q", v.rep.RunID, parent)
	}
}

// checkHeaderLine checks the typescript's script header line against the
// length and digest the open record holds.
func (v *verifier) checkHeaderLine(sum string) {
	h := sha256.New()
	n, _ := io.Copy(h, io.NewSectionReader(v.ts, 0, v.headerLen))
	if n != v.headerLen || hex.EncodeToString(h.Sum(nil)) != sum {
		v.anomaly(vocab.TypescriptFile, 0, 0, "bytes 0..%d (the script header line) differ from the open record", v.headerLen)
	}
}

func (v *verifier) checkRecord(r *integrity.Record, seq, off int64) bool {
	v.notePcap(r, seq)
	switch r.Type {
	case vocab.TypeOpen:
		if seq != 0 {
			v.anomaly(vocab.LogFile, seq, off, "second open record")
			return false
		}
	case vocab.TypeData, vocab.TypeGap:
		v.noteGap(r, seq)
		return v.checkData(r, seq, off)
	case vocab.TypeCheckpoint:
		return v.checkCheckpoint(r, seq, off)
	case vocab.TypeClose:
		v.closeRec, v.closeSeq = r, seq
	case vocab.TypeAuditSession:
		v.noteAuditSession(r, seq, off)
	}
	return true
}

// noteGap lists a gap record in the report: lost or unstored data is
// stated even when everything verifies.
func (v *verifier) noteGap(r *integrity.Record, seq int64) {
	if r.Type != vocab.TypeGap {
		return
	}
	g := Gap{Seq: seq, Reason: r.Attrs["reason"]}
	if r.Data != nil {
		g.Stream, g.Len = r.Data.Stream, r.Data.Len
	} else {
		g.Stream = r.Attrs["stream"]
		g.Len, _ = strconv.ParseInt(r.Attrs["len"], 10, 64)
	}
	if g.Reason == vocab.GapTimingWriteFailed {
		v.untimed += g.Len
	}
	v.rep.Gaps = append(v.rep.Gaps, g)
}

func (v *verifier) checkData(r *integrity.Record, seq, off int64) bool {
	d := r.Data
	if d == nil {
		if r.Type == vocab.TypeData {
			v.anomaly(vocab.LogFile, seq, off, "data record without data")
			return false
		}
		return true
	}
	switch d.Stream {
	case vocab.StreamIn:
		v.rep.Bytes.In += d.Len
	case vocab.StreamOut:
		v.rep.Bytes.Out += d.Len
	case vocab.StreamErr:
		v.rep.Bytes.Err += d.Len
	default:
		v.anomaly(vocab.LogFile, seq, off, "unknown stream %q", d.Stream)
		return false
	}
	if d.Off < 0 || d.Len < 0 {
		return d.Len >= 0 // counted, not stored: the digest is all there is
	}
	if d.Off != v.next {
		v.anomaly(vocab.LogFile, seq, off, "data at typescript offset %d where %d belongs", d.Off, v.next)
		return false
	}
	if v.ts == nil || !v.withinUnsignedBound(d.Off, d.Len, seq, off) {
		return false
	}
	if d.Len > v.tsSize-d.Off {
		// Read nothing the file does not hold: the claim alone is the anomaly.
		v.anomaly(vocab.TypescriptFile, seq, v.tsSize, "typescript ends inside this record's %d bytes (truncated)", d.Len)
		return false
	}
	sum := sha256.New()
	n, _ := io.Copy(sum, io.NewSectionReader(v.ts, d.Off, d.Len))
	if n != d.Len {
		v.anomaly(vocab.TypescriptFile, seq, d.Off+n, "typescript ends inside this record's %d bytes (truncated)", d.Len)
		return false
	}
	if hex.EncodeToString(sum.Sum(nil)) != d.SHA256 {
		v.anomaly(vocab.TypescriptFile, seq, d.Off, "bytes %d..%d differ from the recorded digest", d.Off, d.Off+d.Len)
		return false
	}
	v.next += d.Len
	v.rep.Bytes.Stored += d.Len
	return true
}

// checkCheckpoint verifies a signed head. A bad signature ends trust in the
// chain; a file whose prefix differs from what the head vouches for is an
// anomaly located in that file, and the chain goes on.
func (v *verifier) checkCheckpoint(r *integrity.Record, seq, off int64) bool {
	pub, err := integrity.VerifySSHSIG(r.Sig, integrity.HeadNamespace, integrity.HeadMessage(v.rep.RunID, v.rep.SessionID, uint64(seq-1), r.Prev))
	if err != nil {
		v.anomaly(vocab.LogFile, seq, off, "checkpoint signature: %v", err)
		return false
	}
	if why := v.untrusted(pub); why != "" {
		v.anomaly(vocab.LogFile, seq, off, "checkpoint %s", why)
		return false
	}
	v.rep.Signed++
	v.rep.LastVerifiedSeq, v.rep.LastVerifiedOffset, v.rep.SignedRecords = seq, v.next, int(seq)+1
	v.noteSignedSizes(r.Attrs)
	v.checkPrefix(v.ts, v.tsSize, vocab.TypescriptFile, r.Attrs[vocab.AttrTSSize], r.Attrs[vocab.AttrTSSHA256], seq, &v.tsGood)
	v.checkPrefix(v.tm, v.tmSize, vocab.TimingFile, r.Attrs[vocab.AttrTMSize], r.Attrs[vocab.AttrTMSHA256], seq, &v.tmGood)
	return true
}

// untrusted says why a signing key is not trusted, or "" when it is. A
// revoked key is refused even when it is also listed as trusted.
func (v *verifier) untrusted(pub gossh.PublicKey) string {
	if containsKey(v.keys.Revoked, pub) {
		return fmt.Sprintf("signed by %s, which is revoked (@revoked in the keys given)", gossh.FingerprintSHA256(pub))
	}
	if !containsKey(v.keys.Trusted, pub) {
		return fmt.Sprintf("signed by %s, which is not a trusted key", gossh.FingerprintSHA256(pub))
	}
	return ""
}

func containsKey(keys []gossh.PublicKey, pub gossh.PublicKey) bool {
	for _, k := range keys {
		if bytes.Equal(k.Marshal(), pub.Marshal()) {
			return true
		}
	}
	return false
}

// checkPrefix compares the first size bytes of f with a digest a checkpoint
// or the close record vouches for. good is the prefix an earlier one
// vouched for: damage lies between it and size, which localizes it in the
// timing file (which has no per-record digests) to two checkpoints. It
// reads no more than the file held when it was opened (fileSize).
func (v *verifier) checkPrefix(f *os.File, fileSize int64, name, sizeAttr, sumAttr string, seq int64, good *int64) bool {
	size, err := strconv.ParseInt(sizeAttr, 10, 64)
	if err != nil || size < 0 || f == nil {
		v.anomaly(vocab.LogFile, seq, -1, "record lacks the %s size and digest", name)
		return false
	}
	h := sha256.New()
	n, _ := io.Copy(h, io.NewSectionReader(f, 0, min(size, fileSize)))
	switch {
	case n != size:
		v.anomaly(name, seq, n, "file ends at %d, inside the %d bytes record %d vouches for (truncated)", n, size, seq)
		return false
	case hex.EncodeToString(h.Sum(nil)) != sumAttr:
		v.anomaly(name, seq, *good, "bytes %d..%d differ from the digest record %d vouches for", *good, size, seq)
		return false
	}
	*good = size
	return true
}

// checkEnd decides finalization: a close record, followed by a signed
// checkpoint as the very last record, whose file digests match.
func (v *verifier) checkEnd(nLines int) {
	if v.closeRec == nil {
		v.anomaly(vocab.LogFile, v.rep.LastVerifiedSeq, -1,
			"unfinalized: no close record (sidecar crash, or the log was cut); signed through record %d, typescript offset %d; %d records chain in all, reaching offset %d",
			v.rep.LastVerifiedSeq, v.rep.LastVerifiedOffset, v.rep.Records, v.rep.ChainedOffset)
		v.checkRecovery()
		return
	}
	if v.rep.LastVerifiedSeq != v.closeSeq+1 || int64(nLines) != v.closeSeq+2 {
		v.anomaly(vocab.LogFile, v.closeSeq, -1, "the close record is not followed by exactly one signed checkpoint")
		return
	}
	c := v.closeRec
	ok := v.checkPrefix(v.ts, v.tsSize, vocab.TypescriptFile, c.Attrs[vocab.AttrTSSize], c.Attrs[vocab.AttrTSSHA256], v.closeSeq, &v.tsGood)
	ok = v.checkPrefix(v.tm, v.tmSize, vocab.TimingFile, c.Attrs[vocab.AttrTMSize], c.Attrs[vocab.AttrTMSHA256], v.closeSeq, &v.tmGood) && ok
	if size := c.Attrs[vocab.AttrTSSize]; ok && size != strconv.FormatInt(v.tsSize, 10) {
		v.anomaly(vocab.TypescriptFile, v.closeSeq, v.tsSize, "file is %d bytes, the close record vouches for %s (bytes appended)", v.tsSize, size)
		ok = false
	}
	if size := c.Attrs[vocab.AttrTMSize]; ok && size != strconv.FormatInt(v.tmSize, 10) {
		v.anomaly(vocab.TimingFile, v.closeSeq, v.tmSize, "file is %d bytes, the close record vouches for %s (bytes appended)", v.tmSize, size)
		ok = false
	}
	for stream, n := range map[string]int64{vocab.StreamIn: v.rep.Bytes.In, vocab.StreamOut: v.rep.Bytes.Out, vocab.StreamErr: v.rep.Bytes.Err} {
		if got := c.Attrs[vocab.AttrCloseBytes+stream]; got != strconv.FormatInt(n, 10) {
			v.anomaly(vocab.LogFile, v.closeSeq, -1, "close record counts %s bytes of stream %s, the data records %d", got, stream, n)
			ok = false
		}
	}
	v.rep.Finalized = ok
}
