// Package evidence verifies one session folder: it reads the folder back
// treating every file in it as hostile, and checks the hash chain,
// signatures, data digests, timing totals, witness files and recovery
// statement against the keys an examiner trusts (Verify), giving a Report
// in the vocabulary of kinds.go. It is what the examiner's tools (package
// examine) and the sidecar's startup recovery (package recorder) share,
// and nothing more: it writes nothing into a capture folder, and it builds
// on every OS an examiner's laptop runs.
package evidence

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
	"slices"
	"strconv"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Anomaly is one failed check, located as precisely as the evidence allows.
type Anomaly struct {
	Kind   Kind   `json:"kind"` // what failed (kinds.go)
	File   string `json:"file"`
	Seq    int64  `json:"record"` // -1 when no record is concerned
	Offset int64  `json:"offset"` // byte offset in File; -1 when unknown
	End    int64  `json:"end"`    // end of the byte range from Offset (exclusive); -1 when not a range
	// Expected and Actual are the two values a check compared, where it
	// compared two: a digest (sha256, hex), a size or an offset in bytes,
	// a count, a sequence number. What they are is the kind's and the
	// message's; empty when the check compared no two values.
	Expected string `json:"expected,omitempty"`
	Actual   string `json:"actual,omitempty"`
	Msg      string `json:"msg"`
}

// MarshalJSON writes the anomaly with its class (Kind.Class) first: the
// class follows from the kind, so it is derived here, in the one place
// every anomaly is printed as JSON through, and never stored beside it.
func (a Anomaly) MarshalJSON() ([]byte, error) {
	type plain Anomaly // without this method
	return json.Marshal(struct {
		Class string `json:"class"`
		plain
	}{a.Kind.Class(), plain(a)})
}

// differs states the two values the check compared (Expected, Actual).
func (a *Anomaly) differs(expected, actual any) {
	a.Expected, a.Actual = fmt.Sprint(expected), fmt.Sprint(actual)
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

// Note is something an examiner should know that is no failure: a copy
// in a folder not named by its ids.
type Note struct {
	Kind Kind   `json:"kind"`
	Msg  string `json:"msg"`
}

// Report is the verdict on one session directory.
type Report struct {
	Dir    string `json:"dir"`
	Status Status `json:"status"` // Verdict's; set when the verification ends
	// RunID and SessionID are the signed open record's, whatever the
	// folders are named.
	RunID     string    `json:"run_id"`
	SessionID string    `json:"session_id"`
	Started   time.Time `json:"started,omitzero"` // the open record's time; absent without one
	// Signer is what the open record says signs the session
	// (vocab.SignerSessionKey or SignerHostKey; empty in a session that
	// predates it), SignerSerial its certificate's serial, for a session
	// key.
	Signer       string `json:"signer,omitempty"`
	SignerSerial string `json:"signer_serial,omitempty"`
	// SignerCA is the fingerprint of the CA that issued that certificate
	// (serials are a CA's), for the run's check of serials used twice;
	// not part of the printed report.
	SignerCA string `json:"-"`
	// Records is how many records chain correctly from the start;
	// SignedRecords how many of those a trusted signature covers.
	Records       int `json:"records"`
	SignedRecords int `json:"signed_records"`
	// Finalized: a close record followed by a trusted final checkpoint.
	// Whether the files match it is what Anomalies say.
	Finalized bool `json:"finalized"`
	// Signed counts the checkpoints whose signature verified.
	Signed    int       `json:"signed_checkpoints"`
	Bytes     Totals    `json:"bytes"`     // per stream, as the verified records count them
	Gaps      []Gap     `json:"gaps"`      // data the log says was lost or not stored
	Notes     []Note    `json:"notes"`     // not failures: folder names that differ from the ids
	Anomalies []Anomaly `json:"anomalies"` // every failed check; none means OK if Finalized
	// LastVerifiedSeq and LastVerifiedOffset say how far the evidence is
	// vouched for by a trusted signature: for an unfinalized session, what
	// is trustworthy. Records after it chain, but anyone with write access
	// could have written them.
	LastVerifiedSeq    int64 `json:"last_verified_record"`
	LastVerifiedOffset int64 `json:"last_verified_ts_offset"`
	// ChainedOffset is the typescript offset the chained records reach.
	ChainedOffset int64 `json:"chained_ts_offset"`
	// ShippedSegments counts the chain's shipped records (package ship),
	// Shipped lists them for verify --shipped, which holds them to the
	// bucket.
	ShippedSegments int           `json:"shipped_segments,omitempty"`
	Shipped         []ShippedPart `json:"-"`
	// Pcap is the packet capture's state and files (pcap.go); nil when
	// the session predates it.
	Pcap *PcapReport `json:"pcap,omitempty"`
	// Audit is the audit witness's state and files (audit.go); nil when
	// the session has none.
	Audit *AuditReport `json:"audit,omitempty"`
	// AuditSession is the session's kernel audit session (auditsession.go);
	// nil when the log has no audit-session record.
	AuditSession *AuditSessionReport `json:"audit_session,omitempty"`
	// Unattributed is the reason of the session's unattributed record
	// (vocab.Unattributed*): its processes are not in an audit session of
	// their own. Empty when there is none.
	Unattributed string `json:"unattributed,omitempty"`
	// TornLog is the log's last line when a crash cut it mid-write: no
	// newline, after the last whole record, where no close record or
	// only the close record came before it, and no recorder holds the
	// log. A write that crosses a page boundary can stop at one when
	// SIGKILL arrives; the line is not a record, and a cut at a record
	// boundary would read the same, so it makes the session unfinalized,
	// not tampered. A recovery statement must state these same bytes.
	TornLog *TornLine `json:"torn_log,omitempty"`
	// ChainHead is the hash of the last record that chains, which a
	// recovery record continues from; not part of the printed report.
	ChainHead string `json:"-"`
	// SignedTSSize and SignedTMSize are the typescript and timing sizes
	// the last trusted checkpoint states (0 before any): what lies past
	// them is bounded (MaxUnsignedTail), for the recovery.
	SignedTSSize, SignedTMSize int64 `json:"-"`
}

// TornLine is where a log's torn last line starts, how long it is and its
// digest.
type TornLine struct {
	Off    int64  `json:"offset"`
	Len    int64  `json:"len"`
	SHA256 string `json:"sha256"`
}

// Gap is data the log says was not stored, or not timed, and why; or a
// window in which a witness was blind (First to Last).
type Gap struct {
	Seq    int64  `json:"record"`
	Reason string `json:"reason"`
	Stream string `json:"stream"`
	Len    int64  `json:"len"`
	Count  int64  `json:"count,omitempty"` // packets, audit events, or an audit window's rules not in effect
	// First and Last are when the witness's gap began and ended, as its
	// record says (RFC 3339): the first and last packet not stored, or an
	// audit window; First alone is when an audit loss was noticed.
	First string `json:"first,omitempty"`
	Last  string `json:"last,omitempty"`
	// Error is the record's error: the write that failed, or the restore
	// the kernel refused (the audit window was still open at Last).
	Error string `json:"error,omitempty"`
}

// MarshalJSON writes the gap with its class, GapRecorded: a gap is a
// finding of the record, counted in verify --json's summaries, and no
// failure.
func (g Gap) MarshalJSON() ([]byte, error) {
	type plain Gap // without this method
	return json.Marshal(struct {
		Class string `json:"class"`
		plain
	}{vocab.FindingGapRecorded, plain(g)})
}

// Totals are bytes per stream: recorded in the chain, and stored in the typescript.
type Totals struct {
	In     int64 `json:"in"`
	Out    int64 `json:"out"`
	Err    int64 `json:"err"`
	Stored int64 `json:"stored"`
}

// OK reports whether every check passed and the session was finalized.
func (r *Report) OK() bool { return r.Finalized && len(r.Anomalies) == 0 }

// verdict is the session's Status: a failed check outweighs everything;
// the unfinalized and recovery statements are not failed checks but what
// an unfinalized session has to say.
func (r *Report) verdict(recording bool) Status {
	for _, a := range r.Anomalies {
		if a.Kind != KindUnfinalized && a.Kind != KindRecovered {
			return StatusTampered
		}
	}
	switch {
	case r.Finalized:
		return StatusOK
	case recording:
		return StatusInProgress
	}
	return StatusUnfinalized
}

// Options tune a verification.
type Options struct {
	// Progress, when set, is called with the number of bytes read from
	// the session's files since its previous call.
	Progress func(n int64)
	// PTY, when set, is the session's pty folder, which the caller has
	// opened: every record file is read relative to it, never looked up
	// by path again, so a folder swapped for a link meanwhile is not
	// followed. The startup recovery reads through it. Witness files are
	// still opened below the session folder by path (safefs.OpenRegular).
	PTY *os.File
}

// verifier holds one session's state while its log is replayed.
type verifier struct {
	rep       *Report
	keys      Keys
	opts      Options
	files     sessionFiles
	ts, tm    *os.File
	tsSize    int64
	tmSize    int64
	tsPass    *tsPass
	headerLen int64
	next      int64 // typescript offset the next stored data must start at
	closeRec  *integrity.Record
	closeSeq  int64
	// recording: a recorder held the log when the verification began
	// (live.go); the session is in progress, and its log may end in a
	// line being written.
	recording bool
	// untimed counts stored bytes whose timing entry could not be written
	// (gap records with reason timing-write-failed).
	untimed int64
	// tmClaims are the trusted claims on the timing file's prefixes,
	// compared in one pass after the replay (checkTimingFile).
	tmClaims []prefixClaim
	// untrustedSigners are the fingerprints of valid signatures by keys
	// not given, while no checkpoint was trusted yet: a wrong --key is one
	// finding, not one per checkpoint.
	untrustedSigners []string
	untrustedCount   int
	// witnesses collect the claims about each witness's files
	// (witnessfiles.go): pcap, then audit.
	witnesses []*witnessEvidence
	// terms is what the session's audit files say of its audit session
	// and terminals (auditsession.go).
	terms *sesTerms
	// signer is what the open record says signs the session (signer.go).
	signer sessionSigner
	// lastSigner is the key of the last trusted checkpoint; recovery and
	// recoverySigner the trusted recovery statement and its checkpoint's
	// key. The session's manifest must be signed by the key that sealed it
	// (manifest.go).
	lastSigner     gossh.PublicKey
	recovery       *integrity.Record
	recoverySigner gossh.PublicKey
}

// Verify checks the session in dir against the examiner's trusted and
// revoked keys (Keys: the sidecar's host public key, the CA of session
// keys, and keys revoked): a checkpoint signed by a revoked key ends trust
// in the chain, even when the key is also listed as trusted, and so does
// one signed otherwise than the open record says (signer.go). It is the package's one entry point;
// opts says how the files are read (Options.PTY) and reports progress.
func Verify(dir string, keys Keys, opts Options) *Report {
	return verify(sessionFiles{dir: dir, pty: opts.PTY}, keys, opts).rep
}

// newReport is the report on dir before anything is verified: nothing
// vouched for, and every list empty.
func newReport(dir string) *Report {
	return &Report{Dir: dir, LastVerifiedSeq: -1, LastVerifiedOffset: -1, ChainedOffset: -1,
		Gaps: []Gap{}, Notes: []Note{}, Anomalies: []Anomaly{}}
}

// NotASession is the report on a path that is not a session folder
// (StatusNotASession): msg says what it is and what to give instead. The
// examiner's tools decide that (package examine); the verifier itself
// reads any folder it is given as a session, since the recovery gives it
// only sessions.
func NotASession(dir, msg string) *Report {
	rep := newReport(dir)
	rep.Status = StatusNotASession
	rep.Anomalies = append(rep.Anomalies, Anomaly{Kind: KindNotASession, File: dir, Seq: -1, Offset: -1, End: -1, Msg: msg})
	return rep
}

func verify(files sessionFiles, keys Keys, opts Options) (v *verifier) {
	rep := newReport(files.dir)
	v = &verifier{rep: rep, keys: keys, opts: opts, files: files, closeSeq: -1,
		witnesses: []*witnessEvidence{{class: pcapClass}, {class: auditClass}}}
	defer func() {
		// A forged record must never take the verifier (and a whole run's
		// report) down with it.
		if p := recover(); p != nil {
			rep.Finalized = false
			v.anomaly(KindVerifierStopped, vocab.LogFile, rep.LastVerifiedSeq, -1, "verifier stopped on malformed evidence: %v", p)
		}
		rep.Status = rep.verdict(v.recording)
	}()
	if len(keys.Trusted)+len(keys.Authorities) == 0 {
		v.anomaly(KindNoTrustedKey, "", -1, -1, "no trusted key given: signatures cannot be checked")
	}
	// Whether a recorder holds the log is asked before the log is opened:
	// a recorder that closes meanwhile has written its close record first.
	v.recording = files.recording(vocab.LogFile)
	// The log is opened before the files its records describe: a recorder
	// writes bytes before their records, so the files opened after it hold
	// every byte its records name.
	lr, err := openLog(files, vocab.LogFile)
	if err != nil {
		v.anomaly(KindFileUnreadable, vocab.LogFile, -1, -1, "%v", err)
		return v
	}
	defer lr.Close()
	if v.ts, v.tsSize, err = files.open(vocab.TypescriptFile); err != nil {
		v.anomaly(KindFileUnreadable, vocab.TypescriptFile, -1, -1, "%v", err)
	} else {
		defer v.ts.Close()
		v.tsPass = newTSPass(v, v.ts, v.tsSize)
	}
	if v.tm, v.tmSize, err = files.open(vocab.TimingFile); err != nil {
		v.anomaly(KindFileUnreadable, vocab.TimingFile, -1, -1, "%v", err)
	} else {
		defer v.tm.Close()
	}
	complete, nLines := v.replay(lr)
	if v.tsPass != nil {
		v.tsPass.finish()
	}
	timingReadable := v.checkUnsignedTails()
	if timingReadable && v.tm != nil {
		// The lines are parsed only when the whole chain checked out:
		// after a break their totals would restate the same damage.
		scanLen := v.tmSize
		if v.recording && v.closeRec == nil {
			scanLen = v.rep.SignedTMSize
		}
		v.checkTimingFile(complete, scanLen)
	}
	v.checkEnd(nLines)
	for _, w := range v.witnesses {
		w.check(v)
	}
	rep.Pcap, rep.Audit = pcapReport(v.witnesses[0]), auditReport(v.witnesses[1])
	v.reportTerms()
	// Last: the manifest is held to the folder, and not reported on
	// where the checks above found the fact first.
	v.checkSealManifest()
	return v
}

// anomaly reports a failed check; the caller may state the values it
// compared on the anomaly returned (differs), before the next is reported.
func (v *verifier) anomaly(kind Kind, file string, seq, off int64, format string, args ...any) *Anomaly {
	v.rep.Anomalies = append(v.rep.Anomalies, Anomaly{Kind: kind, File: file, Seq: seq, Offset: off, End: -1, Msg: fmt.Sprintf(format, args...)})
	return &v.rep.Anomalies[len(v.rep.Anomalies)-1]
}

// damage reports bytes [from, to) of file that differ from what record
// seq vouches for; as anomaly, it returns the anomaly reported.
func (v *verifier) damage(kind Kind, file string, seq, from, to int64, format string, args ...any) *Anomaly {
	v.rep.Anomalies = append(v.rep.Anomalies, Anomaly{Kind: kind, File: file, Seq: seq, Offset: from, End: to, Msg: fmt.Sprintf(format, args...)})
	return &v.rep.Anomalies[len(v.rep.Anomalies)-1]
}

func (v *verifier) note(kind Kind, format string, args ...any) {
	v.rep.Notes = append(v.rep.Notes, Note{Kind: kind, Msg: fmt.Sprintf(format, args...)})
}

func (v *verifier) progress(n int64) {
	if v.opts.Progress != nil && n > 0 {
		v.opts.Progress(n)
	}
}

// replay walks the chain. The first break (a record that does not parse,
// or whose seq or prev is wrong) is reported and ends trust in the records
// after it. It returns whether the whole log checked out, and how many
// lines it read (the breaking one included). A session in progress may
// end in a line still being written: it is not a break.
func (v *verifier) replay(lr *logReader) (complete bool, nLines int) {
	prev := ""
	for i := 0; int64(i) < lr.maxLines(); i++ {
		ln, err := lr.next()
		switch {
		case err == io.EOF:
			return true, i
		case err != nil:
			v.anomaly(KindRecordMalformed, vocab.LogFile, int64(i), ln.off, "%v", err)
			return false, i + 1
		case !ln.complete && v.recording && (v.closeRec == nil || int64(i) == v.closeSeq+1):
			return true, i // being written: the close's checkpoint at the latest
		case !ln.complete && (v.closeRec == nil || int64(i) == v.closeSeq+1):
			sum := sha256.Sum256(ln.text)
			v.rep.TornLog = &TornLine{Off: ln.off, Len: int64(len(ln.text)), SHA256: hex.EncodeToString(sum[:])}
			return true, i // cut mid-write by a crash (Report.TornLog)
		case !ln.complete:
			v.anomaly(KindRecordMalformed, vocab.LogFile, int64(i), ln.off, "truncated record (no newline)")
			return false, i + 1
		case !v.chains(int64(i), ln, &prev):
			return false, i + 1
		}
	}
	v.anomaly(KindVerifierStopped, vocab.LogFile, -1, -1, "%v", errLineBound)
	return false, int(lr.maxLines())
}

// chains checks one complete log line, record seq, against the hash of
// the line before (prev), and on success advances prev and the report.
func (v *verifier) chains(seq int64, ln logLine, prev *string) bool {
	r, err := parseRecord(ln.text)
	if err != nil {
		v.anomaly(KindRecordMalformed, vocab.LogFile, seq, ln.off, "%v", err)
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
		v.anomaly(KindChainBroken, vocab.LogFile, seq, ln.off, "sequence %d where %d belongs (record removed, duplicated or reordered)", r.Seq, seq).differs(seq, r.Seq)
		return false
	case r.Prev != *prev:
		v.anomaly(KindChainBroken, vocab.LogFile, seq, ln.off, "previous-hash mismatch: the chain is broken before this record").differs(*prev, r.Prev)
		return false
	case v.closeRec != nil && !(r.Type == vocab.TypeCheckpoint && seq == v.closeSeq+1):
		v.anomaly(KindChainBroken, vocab.LogFile, seq, ln.off, "record after the close")
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
		v.anomaly(KindChainBroken, vocab.LogFile, 0, off, "first record is not an open record")
		return false
	}
	v.rep.RunID, v.rep.SessionID, v.rep.Started = r.Attrs[vocab.AttrRunID], r.Attrs[vocab.AttrSessionID], r.Time
	v.rep.Signer, v.rep.SignerSerial = r.Attrs[vocab.AttrSigner], r.Attrs[vocab.AttrSignerSerial]
	if r.Attrs[vocab.AttrFormat] != vocab.Format {
		v.anomaly(KindFormatUnsupported, vocab.LogFile, 0, off, "format %q, want %q", r.Attrs[vocab.AttrFormat], vocab.Format).differs(vocab.Format, r.Attrs[vocab.AttrFormat])
		return false
	}
	v.checkPlacement()
	signer, err := parseSigner(r.Attrs)
	if err != nil {
		v.anomaly(KindRecordMalformed, vocab.LogFile, 0, off, "%v", err)
		return false
	}
	v.signer = signer
	if signer.cert != nil {
		v.rep.SignerCA = gossh.FingerprintSHA256(signer.cert.SignatureKey)
	}
	n, err := strconv.ParseInt(r.Attrs[vocab.AttrHeaderLen], 10, 64)
	if err != nil || n <= 0 || n > maxHeaderLen {
		v.anomaly(KindRecordMalformed, vocab.LogFile, 0, off, "open record has no plausible typescript header length")
		return false
	}
	v.headerLen, v.next = n, n
	if v.tsPass != nil {
		v.tsPass.header(n, r.Attrs[vocab.AttrHeaderSum])
	}
	return true
}

// maxHeaderLen bounds the typescript header line the open record may claim.
const maxHeaderLen = 1 << 20

// checkPlacement compares the ids in the open record with the folders the
// session lies in: <root>/<run_id>/<session_id> as serve writes it, or a
// harvest's kali-side/<session_id>. The ids are the signed record's; a
// copy renamed on the way (docker cp to any folder) verifies as the
// session it is, and the difference is a note. The path is made absolute
// first, so "." and "live-1" name the folders they are.
func (v *verifier) checkPlacement() {
	dir, err := filepath.Abs(v.rep.Dir)
	if err != nil {
		dir = filepath.Clean(v.rep.Dir)
	}
	if base := filepath.Base(dir); base != v.rep.SessionID {
		v.note(NoteFolderName, "the record is of session %q; the folder is named %q", v.rep.SessionID, base)
	}
	if parent := filepath.Base(filepath.Dir(dir)); parent != v.rep.RunID && parent != vocab.KaliSideDir {
		v.note(NoteRunFolderName, "the record is of run %q; the folder holding the session is named %q", v.rep.RunID, parent)
	}
}

func (v *verifier) checkRecord(r *integrity.Record, seq, off int64) bool {
	for _, w := range v.witnesses {
		w.collect(v, r, seq)
	}
	switch r.Type {
	case vocab.TypeOpen:
		if seq != 0 {
			v.anomaly(KindChainBroken, vocab.LogFile, seq, off, "second open record")
			return false
		}
	case vocab.TypeData, vocab.TypeGap:
		v.noteGap(r, seq)
		return v.checkData(r, seq, off)
	case vocab.TypeCheckpoint:
		return v.checkCheckpoint(r, seq, off)
	case vocab.TypeClose:
		v.closeRec, v.closeSeq = r, seq
		v.claimPrefixes(r.Attrs, seq)
	case vocab.TypeAuditSession:
		v.noteAuditSession(r, seq, off)
	case vocab.TypeUnattributed:
		v.noteUnattributed(r, seq, off)
	case vocab.TypeShipped:
		v.noteShipped(r, seq)
	}
	return true
}

// ShippedPart is a shipped record: a segment of a session file the
// object store acknowledged, where it lies in the file and its SHA-256.
type ShippedPart struct {
	Seq    int64
	File   string
	Part   int
	Offset int64
	Length int64
	SHA256 string
	ETag   string
}

// noteShipped lists a shipped record; one whose numbers do not parse is
// counted and not listed, and verify --shipped says so.
func (v *verifier) noteShipped(r *integrity.Record, seq int64) {
	v.rep.ShippedSegments++
	a := r.Attrs
	part, err1 := strconv.Atoi(a[vocab.AttrShipPart])
	off, err2 := strconv.ParseInt(a[vocab.AttrShipOffset], 10, 64)
	n, err3 := strconv.ParseInt(a[vocab.AttrShipLength], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || part < 1 || off < 0 || n < 0 {
		return
	}
	v.rep.Shipped = append(v.rep.Shipped, ShippedPart{Seq: seq, File: a[vocab.AttrFile], Part: part, Offset: off, Length: n, SHA256: a[vocab.AttrSHA256], ETag: a[vocab.AttrShipETag]})
}

// noteGap lists a gap record in the report: lost or unstored data is
// stated even when everything verifies.
func (v *verifier) noteGap(r *integrity.Record, seq int64) {
	if r.Type != vocab.TypeGap {
		return
	}
	g := Gap{Seq: seq, Reason: r.Attrs[vocab.AttrReason], First: r.Attrs[vocab.AttrFirst], Last: r.Attrs[vocab.AttrLast], Error: r.Attrs[vocab.AttrError]}
	if r.Data != nil {
		g.Stream, g.Len = r.Data.Stream, r.Data.Len
	} else {
		g.Stream = r.Attrs[vocab.AttrStream]
		g.Len, _ = strconv.ParseInt(r.Attrs["len"], 10, 64)
	}
	if g.Reason == vocab.GapTimingWriteFailed {
		v.untimed += g.Len
	}
	v.rep.Gaps = append(v.rep.Gaps, g)
}

// checkData checks a data record's place and bound, and hands its bytes
// to the typescript pass (tspass.go), which checks their digest. Damage
// to the bytes is the typescript's, not the chain's: the chain goes on.
func (v *verifier) checkData(r *integrity.Record, seq, off int64) bool {
	d := r.Data
	if d == nil {
		if r.Type == vocab.TypeData {
			v.anomaly(KindRecordMalformed, vocab.LogFile, seq, off, "data record without data")
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
		v.anomaly(KindRecordMalformed, vocab.LogFile, seq, off, "unknown stream %q", d.Stream)
		return false
	}
	if d.Len < 0 {
		v.anomaly(KindRecordMalformed, vocab.LogFile, seq, off, "%s record claims %d bytes", r.Type, d.Len)
		return false
	}
	if d.Off < 0 {
		return true // counted, not stored: the digest is all there is
	}
	if d.Off != v.next {
		v.anomaly(KindDataMisplaced, vocab.LogFile, seq, off, "data at typescript offset %d where %d belongs", d.Off, v.next).differs(v.next, d.Off)
		return false
	}
	if !v.withinUnsignedBound(d.Off, d.Len, seq, off) {
		return false
	}
	if v.tsPass != nil {
		v.tsPass.data(dataClaim{seq: seq, off: d.Off, len: d.Len, sha: d.SHA256})
	}
	v.next += d.Len
	v.rep.Bytes.Stored += d.Len
	return true
}

// checkCheckpoint verifies a signed head. A bad signature ends trust in the
// chain; a file whose prefix differs from what the head vouches for is an
// anomaly located in that file, and the chain goes on. Checkpoints signed
// by a key not given, before any trusted one, are counted and the chain
// goes on: with a wrong --key, that nothing is signed by a trusted key is
// the one finding (checkEnd).
func (v *verifier) checkCheckpoint(r *integrity.Record, seq, off int64) bool {
	pub, err := integrity.VerifySSHSIG(r.Sig, integrity.HeadNamespace, integrity.HeadMessage(v.rep.RunID, v.rep.SessionID, uint64(seq-1), r.Prev))
	if err != nil {
		v.anomaly(KindSignatureInvalid, vocab.LogFile, seq, off, "checkpoint signature: %v", err)
		return false
	}
	if kind, why := v.untrusted(pub); kind != "" {
		if kind == KindUntrustedKey && v.rep.Signed == 0 {
			v.noteUntrusted(pub)
			return true
		}
		v.anomaly(kind, vocab.LogFile, seq, off, "checkpoint %s", why)
		return false
	}
	if v.untrustedCount > 0 && v.rep.Signed == 0 {
		v.anomaly(KindUntrustedKey, vocab.LogFile, seq, off, "the %d checkpoints before this one are signed by %s, not a trusted key",
			v.untrustedCount, strings.Join(v.untrustedSigners, ", "))
	}
	v.rep.Signed++
	v.lastSigner = pub
	v.rep.LastVerifiedSeq, v.rep.LastVerifiedOffset, v.rep.SignedRecords = seq, v.next, int(seq)+1
	v.noteSignedSizes(r.Attrs)
	if v.tsPass != nil {
		v.tsPass.covered(seq)
	}
	v.claimPrefixes(r.Attrs, seq)
	return true
}

// claimPrefixes takes the file sizes and digests a checkpoint, or the
// close record, states. Only a trusted checkpoint's, or the close
// record's, are taken: the close record's is used once the final
// checkpoint is trusted (checkEnd), and the typescript pass vouches for
// nothing a later signature does not cover.
func (v *verifier) claimPrefixes(attrs map[string]string, seq int64) {
	tsSize, err1 := strconv.ParseInt(attrs[vocab.AttrTSSize], 10, 64)
	tmSize, err2 := strconv.ParseInt(attrs[vocab.AttrTMSize], 10, 64)
	if err1 != nil || err2 != nil || tsSize < 0 || tmSize < 0 {
		v.anomaly(KindRecordMalformed, vocab.LogFile, seq, -1, "record lacks the %s and %s sizes and digests", vocab.TypescriptFile, vocab.TimingFile)
		return
	}
	if v.tsPass != nil {
		v.tsPass.claim(seq, tsSize, attrs[vocab.AttrTSSHA256])
	}
	v.tmClaims = append(v.tmClaims, prefixClaim{seq: seq, size: tmSize, sum: attrs[vocab.AttrTMSHA256]})
}

// noteUntrusted counts a checkpoint signed by a key not given.
func (v *verifier) noteUntrusted(pub gossh.PublicKey) {
	v.untrustedCount++
	if fp := describeSigner(pub); !slices.Contains(v.untrustedSigners, fp) && len(v.untrustedSigners) < 4 {
		v.untrustedSigners = append(v.untrustedSigners, fp)
	}
}

func containsKey(keys []gossh.PublicKey, pub gossh.PublicKey) bool {
	for _, k := range keys {
		if bytes.Equal(k.Marshal(), pub.Marshal()) {
			return true
		}
	}
	return false
}

// checkEnd decides finalization: a close record, followed by a signed
// checkpoint as the very last record; then the files must be no longer
// than the close record says, and its counts must match the records. A
// session without a close record is in progress while a recorder holds
// its log, and unfinalized otherwise; a log no trusted key signed says
// that and nothing more.
func (v *verifier) checkEnd(nLines int) {
	if v.rep.Signed == 0 && v.untrustedCount > 0 {
		v.anomaly(KindUntrustedKey, vocab.LogFile, -1, -1,
			"no checkpoint is signed by a trusted key: the log's checkpoints (%d) are signed by %s, which is not among the keys given",
			v.untrustedCount, strings.Join(v.untrustedSigners, ", "))
		return
	}
	// The close record as the last whole record, with no recorder to
	// write its checkpoint: the sidecar stopped while finalizing, which
	// reads as any other cut of the log does.
	closeLast := v.closeRec != nil && !v.recording && int64(nLines) == v.closeSeq+1
	if v.closeRec == nil || closeLast {
		if v.recording {
			return
		}
		what := "no close record"
		if closeLast {
			what = "the close record is the last whole record and no checkpoint signs it"
		}
		v.anomaly(KindUnfinalized, vocab.LogFile, v.rep.LastVerifiedSeq, -1,
			"unfinalized: %s, and no recorder holds the log (a sidecar crash, a log that was cut, or a copy taken before the close); %s%s",
			what, v.signedThrough(), v.tornStatement())
		v.checkRecovery()
		return
	}
	if v.recording && int64(nLines) == v.closeSeq+1 {
		return // closing: the final checkpoint is being written
	}
	if v.rep.LastVerifiedSeq != v.closeSeq+1 || int64(nLines) != v.closeSeq+2 {
		v.anomaly(KindCloseUnsigned, vocab.LogFile, v.closeSeq, -1, "the close record is not followed by exactly one signed checkpoint")
		return
	}
	v.rep.Finalized = true
	c := v.closeRec
	if size := c.Attrs[vocab.AttrTSSize]; v.ts != nil && !v.tsPass.damaged && !v.tsPass.ended && size != strconv.FormatInt(v.tsSize, 10) {
		v.damage(KindFileAppended, vocab.TypescriptFile, v.closeSeq, v.tsPass.good, v.tsSize, "file is %d bytes, the close record vouches for %s (bytes appended)", v.tsSize, size).differs(size, v.tsSize)
	}
	if size := c.Attrs[vocab.AttrTMSize]; v.tm != nil && size != strconv.FormatInt(v.tmSize, 10) && !v.timingDamaged() {
		v.anomaly(KindFileAppended, vocab.TimingFile, v.closeSeq, v.tmSize, "file is %d bytes, the close record vouches for %s (bytes appended)", v.tmSize, size).differs(size, v.tmSize)
	}
	for stream, n := range map[string]int64{vocab.StreamIn: v.rep.Bytes.In, vocab.StreamOut: v.rep.Bytes.Out, vocab.StreamErr: v.rep.Bytes.Err} {
		if got := c.Attrs[vocab.AttrCloseBytes+stream]; got != strconv.FormatInt(n, 10) {
			v.anomaly(KindCountMismatch, vocab.LogFile, v.closeSeq, -1, "close record counts %s bytes of stream %s, the data records %d", got, stream, n).differs(got, n)
		}
	}
}

// timingDamaged reports whether a timing anomaly was already reported.
func (v *verifier) timingDamaged() bool {
	for _, a := range v.rep.Anomalies {
		if a.File == vocab.TimingFile {
			return true
		}
	}
	return false
}

// tornStatement says where the log's torn last line is, if it has one.
func (v *verifier) tornStatement() string {
	t := v.rep.TornLog
	if t == nil {
		return ""
	}
	return fmt.Sprintf("; the log ends in %d bytes of a record cut mid-write at offset %d (sha256 %s), not a record", t.Len, t.Off, t.SHA256)
}

// signedThrough says how far a trusted signature vouches for the log.
func (v *verifier) signedThrough() string {
	if v.rep.LastVerifiedSeq < 0 {
		return fmt.Sprintf("no trusted checkpoint was written before it ended; %d records chain, reaching typescript offset %d",
			v.rep.Records, v.rep.ChainedOffset)
	}
	return fmt.Sprintf("signed through record %d, typescript offset %d; %d records chain in all, reaching offset %d",
		v.rep.LastVerifiedSeq, v.rep.LastVerifiedOffset, v.rep.Records, v.rep.ChainedOffset)
}
