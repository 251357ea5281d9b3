package integrity

import (
	"bufio"
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
)

// Names of the transcript files the log vouches for, inside <session>/pty/.
const (
	TypescriptFile = "typescript"
	TimingFile     = "timing"
	PTYDir         = "pty"
)

// Attribute names shared by the recorder (writer) and the verifier.
const (
	AttrRunID      = "run_id"
	AttrSessionID  = "session_id"
	AttrFormat     = "format"
	AttrHeaderLen  = "ts_header_len"
	AttrTSSize     = "ts_size"
	AttrTSSHA256   = "ts_sha256"
	AttrTMSize     = "tm_size"
	AttrTMSHA256   = "tm_sha256"
	AttrExitCode   = "exit_code"
	AttrCloseBytes = "bytes_" // + stream: every byte counted, stored or not
)

// maxLogSize bounds what the verifier reads of a log (metadata is a small
// fraction of the transcript; a larger log is itself an anomaly).
const maxLogSize = 1 << 30

// Anomaly is one failed check, located as precisely as the evidence allows.
type Anomaly struct {
	File   string `json:"file"`
	Seq    int64  `json:"record"` // -1 when no record is concerned
	Offset int64  `json:"offset"` // byte offset in File; -1 when unknown
	Msg    string `json:"msg"`
}

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
	Records   int       `json:"records"`
	Finalized bool      `json:"finalized"`
	Signed    int       `json:"signed_checkpoints"`
	Bytes     Totals    `json:"bytes"`
	Anomalies []Anomaly `json:"anomalies"`
	// LastVerifiedSeq and LastVerifiedOffset say how far the chain and the
	// typescript check out: for an unfinalized session, what is trustworthy.
	LastVerifiedSeq    int64 `json:"last_verified_record"`
	LastVerifiedOffset int64 `json:"last_verified_ts_offset"`
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
	trusted   []gossh.PublicKey
	ts, tm    *os.File
	tsSize    int64
	tmSize    int64
	headerLen int64
	next      int64 // typescript offset the next stored data must start at
	closeRec  *Record
	closeSeq  int64
	lastHash  string // chain hash of the last record that checked out
}

// Verify checks the session in dir against keys the examiner trusts (the
// sidecar's host public key).
func Verify(dir string, trusted []gossh.PublicKey) *Report {
	rep := &Report{Dir: dir, LastVerifiedSeq: -1, LastVerifiedOffset: -1}
	v := &verifier{rep: rep, trusted: trusted, closeSeq: -1}
	if len(trusted) == 0 {
		v.anomaly("", -1, -1, "no trusted key given: signatures cannot be checked")
	}
	var err error
	if v.ts, v.tsSize, err = openSized(filepath.Join(dir, PTYDir, TypescriptFile)); err != nil {
		v.anomaly(TypescriptFile, -1, -1, "%v", err)
	} else {
		defer v.ts.Close()
	}
	if v.tm, v.tmSize, err = openSized(filepath.Join(dir, PTYDir, TimingFile)); err != nil {
		v.anomaly(TimingFile, -1, -1, "%v", err)
	} else {
		defer v.tm.Close()
	}
	lines, err := readLog(filepath.Join(dir, PTYDir, LogFile))
	if err != nil {
		v.anomaly(LogFile, -1, -1, "%v", err)
		return rep
	}
	// The timing totals are compared with the chain's only when the whole
	// chain checked out: after a break they would restate the same damage.
	if v.replay(lines) && v.ts != nil && v.tm != nil {
		v.checkTiming()
	}
	v.checkEnd(len(lines))
	return rep
}

func openSized(path string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// logLine is one line of the log with where it starts.
type logLine struct {
	off      int64
	text     []byte
	complete bool // ended by a newline
}

func readLog(path string) ([]logLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxLogSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxLogSize {
		return nil, fmt.Errorf("log larger than %d bytes", maxLogSize)
	}
	var lines []logLine
	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			lines = append(lines, logLine{off: int64(off), text: data[off:]})
			break
		}
		lines = append(lines, logLine{off: int64(off), text: data[off : off+end], complete: true})
		off += end + 1
	}
	return lines, nil
}

func (v *verifier) anomaly(file string, seq, off int64, format string, args ...any) {
	v.rep.Anomalies = append(v.rep.Anomalies, Anomaly{File: file, Seq: seq, Offset: off, Msg: fmt.Sprintf(format, args...)})
}

// replay walks the chain. The first break (a record that does not parse,
// or whose seq or prev is wrong) is reported and ends trust in the records
// after it; checks that need no trust (file sizes) still run at the end.
func (v *verifier) replay(lines []logLine) (complete bool) {
	prev := ""
	for i, ln := range lines {
		seq := int64(i)
		if !ln.complete {
			v.anomaly(LogFile, seq, ln.off, "truncated record (no newline)")
			return false
		}
		var r Record
		dec := json.NewDecoder(bytes.NewReader(ln.text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			v.anomaly(LogFile, seq, ln.off, "record does not parse: %v", err)
			return false
		}
		if i == 0 {
			if !v.checkOpen(&r, ln.off) {
				return false
			}
			prev = Seed(v.rep.RunID, v.rep.SessionID)
		}
		if r.Seq != uint64(i) {
			v.anomaly(LogFile, seq, ln.off, "sequence %d where %d belongs (record removed, duplicated or reordered)", r.Seq, i)
			return false
		}
		if r.Prev != prev {
			v.anomaly(LogFile, seq, ln.off, "previous-hash mismatch: the chain is broken before this record")
			return false
		}
		if v.closeRec != nil && !(r.Type == TypeCheckpoint && seq == v.closeSeq+1) {
			v.anomaly(LogFile, seq, ln.off, "record after the close")
			return false
		}
		if !v.checkRecord(&r, seq, ln.off) {
			return false
		}
		sum := sha256.Sum256(ln.text)
		prev = hex.EncodeToString(sum[:])
		v.lastHash = prev
		v.rep.Records = i + 1
		v.rep.LastVerifiedSeq = seq
		v.rep.LastVerifiedOffset = v.next
	}
	return true
}

func (v *verifier) checkOpen(r *Record, off int64) bool {
	if r.Type != TypeOpen || r.Seq != 0 {
		v.anomaly(LogFile, 0, off, "first record is not an open record")
		return false
	}
	v.rep.RunID, v.rep.SessionID = r.Attrs[AttrRunID], r.Attrs[AttrSessionID]
	if r.Attrs[AttrFormat] != Format {
		v.anomaly(LogFile, 0, off, "format %q, want %q", r.Attrs[AttrFormat], Format)
		return false
	}
	if base := filepath.Base(filepath.Clean(v.rep.Dir)); base != v.rep.SessionID {
		v.anomaly(LogFile, 0, off, "log is for session %q but lies in %q", v.rep.SessionID, base)
	}
	n, err := strconv.ParseInt(r.Attrs[AttrHeaderLen], 10, 64)
	if err != nil || n <= 0 {
		v.anomaly(LogFile, 0, off, "open record has no typescript header length")
		return false
	}
	v.headerLen, v.next = n, n
	if v.ts != nil {
		v.checkHeaderLine()
	}
	return true
}

// checkHeaderLine checks that the typescript starts with script's header
// line of the recorded length.
func (v *verifier) checkHeaderLine() {
	buf := make([]byte, v.headerLen)
	if _, err := v.ts.ReadAt(buf, 0); err != nil || !bytes.HasPrefix(buf, []byte("Script started on ")) || buf[len(buf)-1] != '\n' {
		v.anomaly(TypescriptFile, 0, 0, "header line is not the %d-byte script header the log records", v.headerLen)
	}
}

func (v *verifier) checkRecord(r *Record, seq, off int64) bool {
	switch r.Type {
	case TypeOpen:
		if seq != 0 {
			v.anomaly(LogFile, seq, off, "second open record")
			return false
		}
	case TypeData, TypeGap:
		return v.checkData(r, seq, off)
	case TypeCheckpoint:
		return v.checkCheckpoint(r, seq, off)
	case TypeClose:
		v.closeRec, v.closeSeq = r, seq
	}
	return true
}

func (v *verifier) checkData(r *Record, seq, off int64) bool {
	d := r.Data
	if d == nil {
		if r.Type == TypeData {
			v.anomaly(LogFile, seq, off, "data record without data")
			return false
		}
		return true
	}
	switch d.Stream {
	case StreamIn:
		v.rep.Bytes.In += d.Len
	case StreamOut:
		v.rep.Bytes.Out += d.Len
	case StreamErr:
		v.rep.Bytes.Err += d.Len
	default:
		v.anomaly(LogFile, seq, off, "unknown stream %q", d.Stream)
		return false
	}
	if d.Off < 0 {
		return true // counted, not stored: the digest is all there is
	}
	if d.Off != v.next {
		v.anomaly(LogFile, seq, off, "data at typescript offset %d where %d belongs", d.Off, v.next)
		return false
	}
	if v.ts == nil {
		return false
	}
	sum := sha256.New()
	n, _ := io.Copy(sum, io.NewSectionReader(v.ts, d.Off, d.Len))
	if n != d.Len {
		v.anomaly(TypescriptFile, seq, d.Off+n, "typescript ends inside this record's %d bytes (truncated)", d.Len)
		return false
	}
	if hex.EncodeToString(sum.Sum(nil)) != d.SHA256 {
		v.anomaly(TypescriptFile, seq, d.Off, "bytes %d..%d differ from the recorded digest", d.Off, d.Off+d.Len)
		return false
	}
	v.next += d.Len
	v.rep.Bytes.Stored += d.Len
	return true
}

func (v *verifier) checkCheckpoint(r *Record, seq, off int64) bool {
	pub, err := VerifySSHSIG(r.Sig, HeadNamespace, HeadMessage(v.rep.RunID, v.rep.SessionID, uint64(seq-1), r.Prev))
	if err != nil {
		v.anomaly(LogFile, seq, off, "checkpoint signature: %v", err)
		return false
	}
	if !v.isTrusted(pub) {
		v.anomaly(LogFile, seq, off, "checkpoint signed by %s, which is not a trusted key", gossh.FingerprintSHA256(pub))
		return false
	}
	v.rep.Signed++
	ok := v.checkPrefix(v.ts, TypescriptFile, r.Attrs[AttrTSSize], r.Attrs[AttrTSSHA256], seq)
	return v.checkPrefix(v.tm, TimingFile, r.Attrs[AttrTMSize], r.Attrs[AttrTMSHA256], seq) && ok
}

func (v *verifier) isTrusted(pub gossh.PublicKey) bool {
	for _, k := range v.trusted {
		if bytes.Equal(k.Marshal(), pub.Marshal()) {
			return true
		}
	}
	return false
}

// checkPrefix compares the first size bytes of f with a digest a checkpoint
// or the close record vouches for, which localizes damage to timing (which
// has no per-record digests) between two checkpoints.
func (v *verifier) checkPrefix(f *os.File, name, sizeAttr, sumAttr string, seq int64) bool {
	size, err := strconv.ParseInt(sizeAttr, 10, 64)
	if err != nil || f == nil {
		v.anomaly(LogFile, seq, -1, "record lacks the %s size and digest", name)
		return false
	}
	h := sha256.New()
	n, _ := io.Copy(h, io.NewSectionReader(f, 0, size))
	switch {
	case n != size:
		v.anomaly(name, seq, n, "file is shorter than the %d bytes record %d vouches for (truncated)", size, seq)
		return false
	case hex.EncodeToString(h.Sum(nil)) != sumAttr:
		v.anomaly(name, seq, -1, "first %d bytes differ from the digest record %d vouches for", size, seq)
		return false
	}
	return true
}

// checkTiming checks that the timing file parses as util-linux's advanced
// format and that its I and O totals match the stored bytes of the chain.
func (v *verifier) checkTiming() {
	var in, out int64
	sc := bufio.NewScanner(io.NewSectionReader(v.tm, 0, v.tmSize))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	var off int64
	for sc.Scan() {
		line := sc.Bytes()
		if err := timingTotals(line, &in, &out); err != nil {
			v.anomaly(TimingFile, -1, off, "%v", err)
			return
		}
		off += int64(len(line)) + 1
	}
	if err := sc.Err(); err != nil {
		v.anomaly(TimingFile, -1, off, "%v", err)
		return
	}
	// Without a close record (a crash) the transcript may hold data whose
	// log records were never flushed; the unfinalized anomaly says so.
	if v.closeRec != nil && v.rep.Bytes.Stored != in+out {
		v.anomaly(TimingFile, v.rep.LastVerifiedSeq, -1, "timing accounts for %d bytes (I %d + O %d), the chain for %d stored", in+out, in, out, v.rep.Bytes.Stored)
	}
}

var errTimingLine = errors.New("not a timing line")

func timingTotals(line []byte, in, out *int64) error {
	f := bytes.Fields(line)
	if len(f) < 3 || len(f[0]) != 1 {
		return fmt.Errorf("%w: %.40q", errTimingLine, line)
	}
	if _, err := strconv.ParseFloat(string(f[1]), 64); err != nil {
		return fmt.Errorf("%w: %.40q", errTimingLine, line)
	}
	switch f[0][0] {
	case 'I', 'O':
		n, err := strconv.ParseInt(string(f[2]), 10, 64)
		if err != nil || n < 0 || len(f) != 3 {
			return fmt.Errorf("%w: %.40q", errTimingLine, line)
		}
		if f[0][0] == 'I' {
			*in += n
		} else {
			*out += n
		}
	case 'H', 'S':
	default:
		return fmt.Errorf("%w: %.40q", errTimingLine, line)
	}
	return nil
}

// checkEnd decides finalization: a close record, followed by a signed
// checkpoint as the very last record, whose file digests match.
func (v *verifier) checkEnd(nLines int) {
	if v.closeRec == nil {
		v.anomaly(LogFile, v.rep.LastVerifiedSeq, -1,
			"unfinalized: no close record (sidecar crash, or the log was cut); verified through record %d, typescript offset %d",
			v.rep.LastVerifiedSeq, v.rep.LastVerifiedOffset)
		v.checkRecovery()
		return
	}
	if v.rep.LastVerifiedSeq != v.closeSeq+1 || int64(nLines) != v.closeSeq+2 {
		v.anomaly(LogFile, v.closeSeq, -1, "the close record is not followed by exactly one signed checkpoint")
		return
	}
	c := v.closeRec
	ok := v.checkPrefix(v.ts, TypescriptFile, c.Attrs[AttrTSSize], c.Attrs[AttrTSSHA256], v.closeSeq)
	ok = v.checkPrefix(v.tm, TimingFile, c.Attrs[AttrTMSize], c.Attrs[AttrTMSHA256], v.closeSeq) && ok
	if size := c.Attrs[AttrTSSize]; ok && size != strconv.FormatInt(v.tsSize, 10) {
		v.anomaly(TypescriptFile, v.closeSeq, v.tsSize, "file is %d bytes, the close record vouches for %s (bytes appended)", v.tsSize, size)
		ok = false
	}
	if size := c.Attrs[AttrTMSize]; ok && size != strconv.FormatInt(v.tmSize, 10) {
		v.anomaly(TimingFile, v.closeSeq, v.tmSize, "file is %d bytes, the close record vouches for %s (bytes appended)", v.tmSize, size)
		ok = false
	}
	for stream, n := range map[string]int64{StreamIn: v.rep.Bytes.In, StreamOut: v.rep.Bytes.Out, StreamErr: v.rep.Bytes.Err} {
		if got := c.Attrs[AttrCloseBytes+stream]; got != strconv.FormatInt(n, 10) {
			v.anomaly(LogFile, v.closeSeq, -1, "close record counts %s bytes of stream %s, the data records %d", got, stream, n)
			ok = false
		}
	}
	v.rep.Finalized = ok
}

// LastHead returns the message and signature of the last checkpoint in
// dir's log, for checking with ssh-keygen -Y verify independently of this
// program. It does not verify anything itself.
func LastHead(dir string) (message []byte, sig string, err error) {
	lines, err := readLog(filepath.Join(dir, PTYDir, LogFile))
	if err != nil {
		return nil, "", err
	}
	var run, session string
	for i, ln := range lines {
		var r Record
		if err := json.Unmarshal(ln.text, &r); err != nil {
			return nil, "", fmt.Errorf("%s record %d: %w", LogFile, i, err)
		}
		if r.Type == TypeOpen {
			run, session = r.Attrs[AttrRunID], r.Attrs[AttrSessionID]
		}
		if r.Type == TypeCheckpoint && r.Seq > 0 {
			message, sig = HeadMessage(run, session, r.Seq-1, r.Prev), r.Sig
		}
	}
	if sig == "" {
		return nil, "", fmt.Errorf("%s: no checkpoint", LogFile)
	}
	return message, sig, nil
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
	seq := v.rep.LastVerifiedSeq + 1
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
