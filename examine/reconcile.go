package examine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Verification of a run: every session is verified and, in the lab's
// harvest, compared with the tool server's own tee of what its client
// received.
//
// A run folder as serve writes it:
//
//	<root>/<run_id>/<session_id>/              a session directory (evidence.Verify)
//
// The lab's harvest layout:
//
//	<run-dir>/kali-side/<session_id>/          a session directory (evidence.Verify)
//	<run-dir>/mcp-side/sessions/<session_id>.jsonl
//	    {"ts": <epoch ms>, "dir": "out"|"err", "b64": "<base64 bytes>"} per line
//
// The comparison streams both sides, so memory stays bounded by one tee
// line (maxTeeLine) whatever the size of the session.

const (
	teeDirPath = "mcp-side/sessions"
	teeSuffix  = ".jsonl"

	// maxTeeLine bounds one tee line; the tool server writes a line per
	// read of the client channel, far below this.
	maxTeeLine = 16 << 20
	// maxTeeLineReports bounds the malformed-line anomalies of one tee.
	maxTeeLineReports = 20
	// compareChunk is the unit in which both sides are read and compared.
	compareChunk = 64 << 10
)

// teeStreams pairs each log stream the tee records with the tee's name for
// it and the close-record attribute holding how many of its bytes the
// client's channel accepted (the recorder records before it delivers, so a
// session can record more than it delivered).
var teeStreams = []struct{ stream, dir, delivered string }{
	{vocab.StreamOut, "out", vocab.HeaderBytesDelivered},
	{vocab.StreamErr, "err", vocab.HeaderBytesDeliveredErr},
}

// RunReport is the verdict on one run directory: what serve writes
// (<root>/<run_id>/<session_id>/, Layout "serve") or the lab's harvest of
// it (kali-side/ and mcp-side/, Layout "harvest").
type RunReport struct {
	RunDir   string                   `json:"run_dir"`
	Layout   string                   `json:"layout"`
	RunID    string                   `json:"run_id"` // the run the sessions' signed records name
	Sessions []*SessionReconciliation `json:"sessions"`
	// Anomalies are run-level: a tee with no session, an unreadable
	// directory, an entry that is not a session, sessions of several runs.
	Anomalies []evidence.Anomaly `json:"anomalies"`
	Notes     []evidence.Note    `json:"notes"`
}

// The two run layouts.
const (
	LayoutServe   = "serve"
	LayoutHarvest = "harvest"
)

// SessionReconciliation is one session of a run: its verification, and
// how its delivered bytes compare with the tool server's tee.
type SessionReconciliation struct {
	SessionID string           `json:"session_id"`
	Report    *evidence.Report `json:"report"` // evidence.Verify of the session folder
	Tee       string           `json:"tee,omitempty"`
	// Anomalies are the reconciliation's: malformed tee lines and
	// divergences; File is the tee or the typescript.
	Anomalies []evidence.Anomaly `json:"anomalies"`
}

// OK reports whether every session verified, matched its tee where there
// is one, and nothing is wrong at the run level.
func (r *RunReport) OK() bool {
	if len(r.Anomalies) > 0 {
		return false
	}
	for _, s := range r.Sessions {
		if !s.Report.OK() || len(s.Anomalies) > 0 {
			return false
		}
	}
	return true
}

func (r *RunReport) anomaly(kind evidence.Kind, file, format string, args ...any) {
	r.Anomalies = append(r.Anomalies, evidence.Anomaly{Kind: kind, File: file, Seq: -1, Offset: -1, End: -1, Msg: fmt.Sprintf(format, args...)})
}

// anomaly reports a finding of the reconciliation; the caller may state
// the two values compared (Expected, Actual) on the anomaly returned.
func (s *SessionReconciliation) anomaly(kind evidence.Kind, file string, off int64, format string, args ...any) *evidence.Anomaly {
	s.Anomalies = append(s.Anomalies, evidence.Anomaly{Kind: kind, File: file, Seq: -1, Offset: off, End: -1, Msg: fmt.Sprintf(format, args...)})
	return &s.Anomalies[len(s.Anomalies)-1]
}

// VerifyRun verifies every session of runDir against the examiner's keys
// (evidence.Verify with opts, each session by its path: opts.PTY, one
// session's open folder, is not used) and, in a harvest, reconciles each
// one that has a tee with it. A session without a tee is not an anomaly
// (not every session is teed); a tee without a session is.
func VerifyRun(runDir string, keys evidence.Keys, opts evidence.Options) *RunReport {
	opts.PTY = nil
	rr := &RunReport{RunDir: runDir, Layout: runLayout(runDir), Sessions: []*SessionReconciliation{}, Anomalies: []evidence.Anomaly{}, Notes: []evidence.Note{}}
	if why := notARun(runDir); why != "" {
		rr.anomaly(evidence.KindNotASession, runDir, "%s", why)
		return rr
	}
	tees := map[string]string{}
	sessionsRel := ""
	if rr.Layout == LayoutHarvest {
		tees, sessionsRel = rr.listTees(), vocab.KaliSideDir
	}
	sessions := filepath.Join(runDir, sessionsRel)
	entries, err := readRunDir(runDir, sessionsRel)
	if err != nil {
		rr.anomaly(evidence.KindFileUnreadable, sessions, "cannot read the sessions: %v", err)
	}
	for _, e := range entries {
		dir := filepath.Join(sessions, e.Name())
		if e.Name() == vocab.SidecarDir && rr.Layout != LayoutHarvest {
			continue // a capture root given for a run folder: the sidecar's own folder holds no session
		}
		if !e.IsDir() {
			rr.anomaly(evidence.KindNotASession, dir, "not a session directory (symbolic links are not followed)")
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, vocab.PTYDir)); errors.Is(err, os.ErrNotExist) {
			// A capture root given for a run folder lands here for each run.
			rr.anomaly(evidence.KindNotASession, dir, "not a session directory (no %s folder); --run-dir takes a run folder, <root>/<run_id>, or a harvest", vocab.PTYDir)
			continue
		}
		sr := &SessionReconciliation{SessionID: e.Name(), Report: evidence.Verify(dir, keys, opts), Anomalies: []evidence.Anomaly{}}
		// The signed id names the session, and its tee.
		if sr.Report.SessionID != "" {
			sr.SessionID = sr.Report.SessionID
		}
		if tee, ok := tees[sr.SessionID]; ok {
			delete(tees, sr.SessionID)
			sr.Tee = tee
			sr.reconcile(dir)
		}
		rr.Sessions = append(rr.Sessions, sr)
	}
	if len(rr.Sessions) == 0 && err == nil {
		rr.anomaly(evidence.KindNoSessions, sessions, "no sessions: nothing was verified")
	}
	rr.checkRunIDs()
	rr.checkSerials()
	rr.checkSerialOrder()
	ids := make([]string, 0, len(tees))
	for id := range tees {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		rr.anomaly(evidence.KindTeeWithoutSession, tees[id], "tee of session %q, which has no Kali-side session", id)
	}
	return rr
}

// runLayout tells a harvest (a kali-side or mcp-side entry, whatever it
// is: a link there is reported when it is read) from a run folder as
// serve writes it.
func runLayout(runDir string) string {
	for _, name := range []string{vocab.KaliSideDir, "mcp-side"} {
		if _, err := os.Lstat(filepath.Join(runDir, name)); err == nil {
			return LayoutHarvest
		}
	}
	return LayoutServe
}

// checkRunIDs takes the run id most sessions' signed records name as the
// run's: a session of another run among them is an anomaly (it was moved
// there), and a run folder named otherwise is a note (a copy renamed on
// the way). Ties go to the first session in name order.
func (r *RunReport) checkRunIDs() {
	count := map[string]int{}
	for _, s := range r.Sessions {
		if id := s.Report.RunID; id != "" {
			if count[id]++; count[id] > count[r.RunID] {
				r.RunID = id
			}
		}
	}
	for _, s := range r.Sessions {
		if id := s.Report.RunID; id != "" && id != r.RunID {
			s.anomaly(evidence.KindRunMismatch, s.Report.Dir, -1, "session was recorded for run %q, not for run %q as the other sessions here", id, r.RunID)
		}
	}
	if base := filepath.Base(absPath(r.RunDir)); r.RunID != "" && base != r.RunID {
		r.Notes = append(r.Notes, evidence.Note{Kind: evidence.NoteRunFolderName, Msg: fmt.Sprintf("the sessions are of run %q; the run folder is named %q", r.RunID, base)})
	}
}

// checkSerials reports every session of a certificate serial another
// session of the run was signed with too: a session key signs exactly one
// session and is destroyed when it is sealed, so a serial seen twice is a
// key stolen or replayed, and which of the sessions is the genuine one the
// evidence cannot tell. Only sessions a trusted signature vouches for are
// counted, their serial bound by the certificate that signed them
// (package evidence checks the two agree): a session no key vouches for
// fails on its own, and must not cast doubt on one that is sound.
// Serials are a CA's, so they are compared with the CA's fingerprint.
func (r *RunReport) checkSerials() {
	type serial struct{ ca, serial string }
	bySerial := map[serial][]*SessionReconciliation{}
	for _, s := range r.Sessions {
		rep := s.Report
		if rep.Signer == vocab.SignerSessionKey && rep.SignerSerial != "" && rep.Signed > 0 {
			k := serial{rep.SignerCA, rep.SignerSerial}
			bySerial[k] = append(bySerial[k], s)
		}
	}
	for k, sessions := range bySerial {
		if len(sessions) < 2 {
			continue
		}
		ids := make([]string, len(sessions))
		for i, s := range sessions {
			ids[i] = strconv.Quote(s.SessionID)
		}
		for _, s := range sessions {
			s.anomaly(evidence.KindSerialReused, s.Report.Dir, -1, "sessions %s are all signed by session keys certified with serial %s by the CA %s: a session key signs one session, so the key was stolen or replayed",
				strings.Join(ids, ", "), k.serial, k.ca)
		}
	}
}

// serialSkew is how far apart two sessions' starts may lie in the wrong
// order of their serials: sessions opened together take their keys in
// one order and write their open records in another.
const serialSkew = 2 * time.Second

// checkSerialOrder reports the sessions whose serial is out of the order
// of their starts. The pool hands its keys out lowest serial first, and
// provisionings number from the clock, so a session of one CA that
// started well after another has the higher serial. A thief who copied an
// unused key from the pool and re-signed an earlier session with it
// breaks that order against every session started after it: the copied
// serial is above all of theirs. Only sessions a trusted signature
// vouches for are compared, as in checkSerials.
func (r *RunReport) checkSerialOrder() {
	type signed struct {
		s      *SessionReconciliation
		serial uint64
	}
	byCA := map[string][]signed{}
	for _, s := range r.Sessions {
		rep := s.Report
		if rep.Signer != vocab.SignerSessionKey || rep.Signed == 0 || rep.Started.IsZero() {
			continue
		}
		n, err := strconv.ParseUint(rep.SignerSerial, 10, 64)
		if err != nil {
			continue // record-malformed already (package evidence)
		}
		byCA[rep.SignerCA] = append(byCA[rep.SignerCA], signed{s, n})
	}
	for ca, sessions := range byCA {
		slices.SortFunc(sessions, func(a, b signed) int { return a.s.Report.Started.Compare(b.s.Report.Started) })
		for i, a := range sessions {
			for _, b := range sessions[i+1:] {
				if a.serial > b.serial && b.s.Report.Started.Sub(a.s.Report.Started) > serialSkew {
					a.s.anomaly(evidence.KindSerialOutOfOrder, a.s.Report.Dir, -1, "started %s with serial %d of the CA %s, before session %q, which started %s with the lower serial %d: the pool hands keys out lowest first, so this session's key was taken later than its start says (a pool key copied and used to re-sign it)",
						a.s.Report.Started.Format(time.RFC3339), a.serial, ca, b.s.SessionID, b.s.Report.Started.Format(time.RFC3339), b.serial)
					break
				}
			}
		}
	}
}

// absPath is path made absolute, so "." names the folder it is.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return filepath.Clean(path)
}

// listTees returns the tee files by session id. A run without a tee
// directory has no tees.
func (r *RunReport) listTees() map[string]string {
	dir := filepath.Join(r.RunDir, teeDirPath)
	tees := map[string]string{}
	entries, err := readRunDir(r.RunDir, teeDirPath)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.anomaly(evidence.KindFileUnreadable, dir, "cannot read the tool server's tees: %v", err)
		}
		return tees
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), teeSuffix)
		if !ok {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if !e.Type().IsRegular() {
			r.anomaly(evidence.KindFileUnreadable, path, "tee is not a regular file (symbolic links are not followed)")
			continue
		}
		tees[id] = path
	}
	return tees
}

// reconcile compares, per stream, the bytes the session in dir recorded as
// delivered with the tee. Only the records evidence.Verify vouched for are
// used: the bytes of a broken or tampered log are not evidence of anything.
func (s *SessionReconciliation) reconcile(dir string) {
	logPath := filepath.Join(dir, vocab.PTYDir, vocab.LogFile)
	if s.Report.SignedRecords == 0 {
		s.anomaly(evidence.KindNotReconciled, s.Tee, -1, "not reconciled: no record of the session's integrity log is covered by a trusted signature")
		return
	}
	for _, a := range s.Report.Anomalies {
		if a.File == vocab.TypescriptFile {
			s.anomaly(evidence.KindNotReconciled, s.Tee, -1, "not reconciled: the typescript differs from its records (the session's anomalies say where), so its bytes are no evidence of delivery")
			return
		}
	}
	recs, err := evidence.VerifiedRecords(dir, s.Report.SignedRecords)
	if err != nil {
		s.anomaly(evidence.KindNotReconciled, logPath, -1, "not reconciled: %v", err)
		return
	}
	tsPath := filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile)
	ts, _, err := safefs.OpenRegular(dir, vocab.PTYDir+"/"+vocab.TypescriptFile)
	if err != nil {
		s.anomaly(evidence.KindNotReconciled, tsPath, -1, "not reconciled: %v", err)
		return
	}
	defer ts.Close()
	teeLens, ok := s.scanTee()
	if !ok {
		return
	}
	for _, st := range teeStreams {
		limit, seq, err := delivered(recs, st.delivered)
		if err != nil {
			s.Anomalies = append(s.Anomalies, evidence.Anomaly{Kind: evidence.KindRecordMalformed, File: logPath, Seq: seq, Offset: -1, End: -1,
				Msg: fmt.Sprintf("%v; comparing every recorded byte of the %s stream", err, st.dir)})
		}
		segs, sideLen := sideSegments(recs, st.stream, limit)
		if limit > sideLen {
			s.Anomalies = append(s.Anomalies, evidence.Anomaly{Kind: evidence.KindCountMismatch, File: logPath, Seq: seq, Offset: -1, End: -1,
				Expected: strconv.FormatInt(limit, 10), Actual: strconv.FormatInt(sideLen, 10), Msg: fmt.Sprintf("%s stream: the close record counts %d bytes delivered, only %d were recorded", st.dir, limit, sideLen)})
		}
		c := &streamCompare{s: s, ts: ts, tsPath: tsPath, dir: st.dir, segs: segs, sideLen: sideLen, teeLen: teeLens[st.dir]}
		c.run()
	}
}

// delivered returns the byte count the close record holds in attr, and the
// record's seq; -1 (compare every recorded byte) when the session is
// unfinalized or the record does not say.
func delivered(recs []integrity.Record, attr string) (n, seq int64, err error) {
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Type != vocab.TypeClose {
			continue
		}
		v, ok := recs[i].Attrs[attr]
		if !ok {
			return -1, int64(i), nil
		}
		if n, err = strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
			return -1, int64(i), fmt.Errorf("close record: %s is %.40q, not a byte count", attr, v)
		}
		return n, int64(i), nil
	}
	return -1, -1, nil
}

// segment is a run of one stream's bytes as the log accounts for them:
// stored in the typescript at off, or (off < 0) known only by their
// SHA-256, because they were past the size cap or a write failed. sha is
// "" when the run is only part of what the digest covers.
type segment struct {
	off, len int64
	sha      string
}

// sideSegments lists stream's bytes in record order, cut after limit bytes
// (limit < 0: no cut), and their total.
func sideSegments(recs []integrity.Record, stream string, limit int64) ([]segment, int64) {
	var segs []segment
	var total int64
	for _, r := range recs {
		d := r.Data
		if (r.Type != vocab.TypeData && r.Type != vocab.TypeGap) || d == nil || d.Stream != stream || d.Len <= 0 {
			continue
		}
		n := d.Len
		if limit >= 0 {
			n = min(n, limit-total)
		}
		if n <= 0 {
			break
		}
		sg := segment{off: d.Off, len: n, sha: d.SHA256}
		if n < d.Len {
			sg.sha = ""
		}
		segs = append(segs, sg)
		total += n
	}
	return segs, total
}

// scanTee reads the tee once: each malformed line becomes an anomaly (and
// is skipped by the comparison), and the byte count per direction is
// returned. It reports false when the tee cannot be read at all.
func (s *SessionReconciliation) scanTee() (map[string]int64, bool) {
	t, err := openTee(s.Tee, "")
	if err != nil {
		s.anomaly(evidence.KindFileUnreadable, s.Tee, -1, "cannot read the tee: %v", err)
		return nil, false
	}
	defer t.Close()
	lens := map[string]int64{}
	bad := 0
	for {
		dir, data, err := t.next()
		var le *teeLineError
		switch {
		case err == io.EOF:
			if bad > maxTeeLineReports {
				s.anomaly(evidence.KindTeeMalformed, s.Tee, -1, "%d more malformed lines", bad-maxTeeLineReports)
			}
			return lens, true
		case errors.As(err, &le):
			if bad++; bad <= maxTeeLineReports {
				s.anomaly(evidence.KindTeeMalformed, s.Tee, le.off, "line %d: malformed tee line: %s", le.line, le.msg)
			}
		case err != nil:
			s.anomaly(evidence.KindFileUnreadable, s.Tee, -1, "cannot read the tee: %v", err)
			return nil, false
		default:
			lens[dir] += int64(len(data))
		}
	}
}

// streamCompare compares one stream of a session with the same direction
// of its tee.
type streamCompare struct {
	s       *SessionReconciliation
	ts      io.ReaderAt
	tsPath  string
	dir     string // the tee's name of the stream: "out" or "err"
	segs    []segment
	sideLen int64
	teeLen  int64
}

var (
	// errUnstored stops a sideReader at bytes the typescript does not hold.
	errUnstored = errors.New("bytes not stored in the typescript")
	// errTSShort reports a typescript that ends before bytes its log records.
	errTSShort = errors.New("typescript ends before bytes its log records")
	// errReported stops a comparison whose anomaly is already reported.
	errReported = errors.New("reported")
)

// run walks the stream segment by segment: stored bytes are compared byte
// for byte, unstored ones against their digest. Only the first divergence
// is reported; what follows it is shifted or unrelated.
func (c *streamCompare) run() {
	tee, err := openTee(c.s.Tee, c.dir)
	if err != nil {
		c.s.anomaly(evidence.KindFileUnreadable, c.s.Tee, -1, "cannot read the tee: %v", err)
		return
	}
	defer tee.Close()
	var pos, same int64
	for _, sg := range c.segs {
		if sg.off < 0 {
			same, err = c.checkUnstored(tee, sg, pos)
		} else {
			same, err = equalPrefix(io.NewSectionReader(c.ts, sg.off, sg.len), tee, sg.len)
		}
		switch {
		case errors.Is(err, errReported):
			return
		case errors.Is(err, errTSShort):
			c.s.anomaly(evidence.KindFileTruncated, c.tsPath, sg.off+same, "%s stream: %v", c.dir, err)
			return
		case err != nil:
			c.s.anomaly(evidence.KindFileUnreadable, c.s.Tee, -1, "%s stream: %v", c.dir, err)
			return
		case same < sg.len:
			c.diverged(pos + same)
			return
		}
		pos += sg.len
	}
	if c.teeLen > pos {
		c.diverged(pos)
	}
}

// checkUnstored hashes the tee's next sg.len bytes and compares them with
// the digest of bytes the sidecar counted but did not store (past the size
// cap, or a failed write). It returns how many bytes the tee had.
func (c *streamCompare) checkUnstored(tee io.Reader, sg segment, pos int64) (int64, error) {
	h := sha256.New()
	n, err := io.CopyN(h, tee, sg.len)
	if err != nil && err != io.EOF {
		return n, err
	}
	switch {
	case n < sg.len:
	case sg.sha == "":
		c.s.anomaly(evidence.KindNotReconciled, c.s.Tee, pos, "%s stream: tee bytes %d..%d cannot be checked: the sidecar did not store them and delivered only part of what their digest covers",
			c.dir, pos, pos+sg.len)
	case hex.EncodeToString(h.Sum(nil)) != sg.sha:
		a := c.s.anomaly(evidence.KindTeeMismatch, c.s.Tee, pos, "%s stream: tee bytes %d..%d differ from the digest of the bytes the sidecar counted but did not store",
			c.dir, pos, pos+sg.len)
		a.Expected, a.Actual = sg.sha, hex.EncodeToString(h.Sum(nil))
		return n, errReported
	}
	return n, nil
}

// equalPrefix reads n bytes of side and up to n of tee, and returns how
// many leading bytes agree. A side shorter than n is errTSShort, or the
// side's own error.
func equalPrefix(side, tee io.Reader, n int64) (int64, error) {
	a, b := make([]byte, compareChunk), make([]byte, compareChunk)
	var same int64
	for same < n {
		k := int(min(n-same, compareChunk))
		if _, err := io.ReadFull(side, a[:k]); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				err = errTSShort
			}
			return same, err
		}
		m, err := io.ReadFull(tee, b[:k])
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return same, err
		}
		for i := range m {
			if a[i] != b[i] {
				return same + int64(i), nil
			}
		}
		if same += int64(m); m < k {
			break
		}
	}
	return same, nil
}

// diverged reports the first difference, at stream offset n, classified
// when the rest of the streams shows a single inserted, removed or changed
// byte. The length difference admits at most one of the three.
func (c *streamCompare) diverged(n int64) {
	var msg string
	switch d := c.teeLen - c.sideLen; {
	case d == 1 && c.tailsEqual(n, 0, 1):
		msg = fmt.Sprintf("byte inserted in the tee at offset %d", n)
	case d == -1 && c.tailsEqual(n, 1, 0):
		msg = fmt.Sprintf("byte removed from the tee at offset %d", n)
	case d == 0 && n < c.sideLen && c.tailsEqual(n, 1, 1):
		var s [1]byte
		io.ReadFull(&sideReader{ts: c.ts, segs: c.segs, skip: n}, s[:])
		_, t := c.teeAt(n)
		msg = fmt.Sprintf("byte changed at offset %d (sidecar 0x%02x, tee 0x%02x)", n, s[0], t)
	default:
		msg = fmt.Sprintf("streams differ from offset %d (sidecar %d bytes, tee %d bytes)", n, c.sideLen, c.teeLen)
	}
	if line, _ := c.teeAt(n); line > 0 {
		msg += fmt.Sprintf("; the tee's byte %d is on its line %d", n, line)
	}
	c.s.anomaly(evidence.KindTeeMismatch, c.s.Tee, n, "%s stream: %s", c.dir, msg)
}

// teeAt returns the tee's stream byte n and the line it is on; line 0 when
// the tee ends before it.
func (c *streamCompare) teeAt(n int64) (line int, b byte) {
	tee, err := c.teeFrom(n)
	if err != nil {
		return 0, 0
	}
	defer tee.Close()
	if tee.fill() != nil {
		return 0, 0
	}
	return tee.line, tee.buf[0]
}

// tailsEqual reports whether side[n+skipSide:] equals tee[n+skipTee:],
// which the caller has made the same length. Unstored bytes in the side's
// tail make it false: they cannot be compared under a shift.
func (c *streamCompare) tailsEqual(n, skipSide, skipTee int64) bool {
	tee, err := c.teeFrom(n + skipTee)
	if err != nil {
		return false
	}
	defer tee.Close()
	rest := c.sideLen - n - skipSide
	same, err := equalPrefix(&sideReader{ts: c.ts, segs: c.segs, skip: n + skipSide}, tee, rest)
	return err == nil && same == rest
}

// teeFrom opens the tee's stream positioned at stream offset n.
func (c *streamCompare) teeFrom(n int64) (*teeStream, error) {
	tee, err := openTee(c.s.Tee, c.dir)
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, tee, n); err != nil {
		tee.Close()
		return nil, err
	}
	return tee, nil
}

// sideReader reads a stream's stored bytes from skip on, and fails with
// errUnstored at bytes the typescript does not hold.
type sideReader struct {
	ts   io.ReaderAt
	segs []segment
	skip int64 // offset into segs[0]
}

func (r *sideReader) Read(p []byte) (int, error) {
	for len(r.segs) > 0 && r.skip >= r.segs[0].len {
		r.skip -= r.segs[0].len
		r.segs = r.segs[1:]
	}
	if len(r.segs) == 0 {
		return 0, io.EOF
	}
	sg := r.segs[0]
	if sg.off < 0 {
		return 0, errUnstored
	}
	want := min(int64(len(p)), sg.len-r.skip)
	n, err := r.ts.ReadAt(p[:want], sg.off+r.skip)
	r.skip += int64(n)
	if int64(n) == want {
		return n, nil
	}
	if err == io.EOF {
		err = errTSShort
	}
	return n, err
}
