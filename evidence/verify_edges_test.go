package evidence_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// Whole sessions, each a forgery or an accident, and the exact findings
// the verifier owes it (issue 27's mutants of verify.go and tspass.go).
//
// Equivalent mutants (gremlins; no test can tell them apart):
//   - verify.go:238 `closeSeq: -1` (-> 1): every read of closeSeq is guarded by
//     closeRec != nil (replay, chains, checkEnd, checkTimingFile) or by a
//     witness's closed flag (witnessfiles.go checkCount), both set by the same
//     close record that sets closeSeq.
//   - timing.go:54 `off := int64(-1)` (-> 1): scriptfmt.Scan wraps every error
//     it returns, read errors included, in a *scriptfmt.LineError, so off is
//     always its line's offset.
//   - verify.go:687 (691 since the negative-length fix) `LastVerifiedSeq < 0`
//     -> `<= 0`: LastVerifiedSeq is -1 or a checkpoint's seq, never 0 (record 0
//     must be the open record).
//   - witnessfiles.go:183 `v.closeSeq > v.rep.LastVerifiedSeq` -> `>=`: the two
//     are never equal once a close record is seen (LastVerifiedSeq is a
//     checkpoint's seq, closeSeq the close record's).

// exactly fails unless rep holds exactly the findings want, in order.
func exactly(t *testing.T, rep *evidence.Report, want ...evidence.Anomaly) {
	t.Helper()
	if len(rep.Anomalies) != len(want) {
		t.Fatalf("findings\n %+v\nwant\n %+v", rep.Anomalies, want)
	}
	for i := range want {
		if rep.Anomalies[i] != want[i] {
			t.Errorf("finding %d\n %+v\nwant\n %+v", i, rep.Anomalies[i], want[i])
		}
	}
}

func logLines(t *testing.T, dir string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(ptyFile(dir, vocab.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

// The examiner forgot --key: the finding says so once, and concerns no
// record and no offset.
func TestNoKeyGivenConcernsNoRecord(t *testing.T) {
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-k", "sess-k", recordertest.Signer(), nil, nil)
	rep := evidence.Verify(dir, evidence.Keys{}, evidence.Options{})
	want := evidence.Anomaly{Kind: evidence.KindNoTrustedKey, File: "", Seq: -1, Offset: -1, End: -1,
		Msg: "no trusted key given: signatures cannot be checked"}
	if len(rep.Anomalies) == 0 || rep.Anomalies[0] != want {
		t.Errorf("findings %+v, want first %+v", rep.Anomalies, want)
	}
}

// A session folder whose log is gone (deleted, or a copy that missed it):
// one unreadable-log finding, concerning no record and no offset.
func TestMissingLogConcernsNoRecord(t *testing.T) {
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-l", "sess-l", recordertest.Signer(), nil, nil)
	if err := os.Remove(ptyFile(dir, vocab.LogFile)); err != nil {
		t.Fatal(err)
	}
	rep := verify(dir, recordertest.Signer().PublicKey())
	if len(rep.Anomalies) != 1 {
		t.Fatalf("findings %+v, want one", rep.Anomalies)
	}
	if a := rep.Anomalies[0]; a.Kind != evidence.KindFileUnreadable || a.File != vocab.LogFile || a.Seq != -1 || a.Offset != -1 || a.End != -1 || !strings.Contains(a.Msg, vocab.LogFile) {
		t.Errorf("finding %+v, want %s of %s at record -1, offset -1, naming the file", a, evidence.KindFileUnreadable, vocab.LogFile)
	}
}

// The examiner gave the wrong key: every checkpoint is signed by another
// one. That is the one finding, about the log as a whole (no record, no
// offset), naming the signer.
func TestOnlyAnotherKeySignedConcernsNoRecord(t *testing.T) {
	other := testutil.NewSigner()
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-w", "sess-w", other, nil, nil)
	rep := verify(dir, recordertest.Signer().PublicKey())
	exactly(t, rep, evidence.Anomaly{Kind: evidence.KindUntrustedKey, File: vocab.LogFile, Seq: -1, Offset: -1, End: -1,
		Msg: fmt.Sprintf("no checkpoint is signed by a trusted key: the log's checkpoints (1) are signed by %s, which is not among the keys given",
			gossh.FingerprintSHA256(other.PublicKey()))})
}

// A cut session is signed through its last trusted checkpoint, which
// signs itself with the records before it: Unfinalized's checkpoint is
// record 2, so records 0..2 are signed, of the 5 that chain.
func TestSignedRecordsCountTheCheckpoint(t *testing.T) {
	signer := recordertest.Signer()
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-s", "sess-s", signer, nil, nil)
	rep := verify(dir, signer.PublicKey())
	if rep.LastVerifiedSeq != 2 || rep.SignedRecords != 3 || rep.Records != 5 || rep.UnsignedRange() != "3-4" {
		t.Errorf("last verified record %d, %d signed of %d records (unsigned %s); want 2, 3 of 5 (3-4)",
			rep.LastVerifiedSeq, rep.SignedRecords, rep.Records, rep.UnsignedRange())
	}
}

// Verification reads each byte of the typescript and the timing file
// once, and reports exactly those bytes as progress (Options.Progress):
// a progress bar that ends at the files' total.
func TestProgressCountsEachByteOnce(t *testing.T) {
	dir := finalized(t, recorder.Options{Signer: recordertest.Signer()})
	var total int64
	for _, name := range []string{vocab.TypescriptFile, vocab.TimingFile} {
		st, err := os.Stat(ptyFile(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
	}
	var read int64
	rep := evidence.Verify(dir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{Progress: func(n int64) { read += n }})
	if !rep.OK() || read != total {
		t.Errorf("OK %v (%v), progress %d bytes; want OK and the files' %d bytes", rep.OK(), rep.Anomalies, read, total)
	}
}

// The forgery the last checkpoint leaves open: its signature covers the
// records before it, never its own attributes, and no record after it
// hashes its line. A byte flipped in data after the previous checkpoint,
// with the last checkpoint's typescript digest rewritten to match the
// flipped file, is still found as that data record's mismatch.
func TestForgedLastCheckpointDigestDoesNotHideAFlippedByte(t *testing.T) {
	signer := recordertest.Signer()
	ts := []byte(recordertest.UnfinalizedHeader + recordertest.UnfinalizedBody)
	tm := []byte("O 0.100000 7\nO 0.100000 7\n")
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-x", "sess-x", signer, nil, func(w *integrity.Writer) error {
		return w.Checkpoint(recordertest.PrefixAttrs(ts, tm)) // record 5, honest
	})
	header := int64(len(recordertest.UnfinalizedHeader))
	ts[header+7+2] ^= 1 // in record 3, "world\r\n"
	if err := os.WriteFile(ptyFile(dir, vocab.TypescriptFile), ts, 0o600); err != nil {
		t.Fatal(err)
	}
	lines := logLines(t, dir)
	var last integrity.Record
	if err := json.Unmarshal(lines[5], &last); err != nil || last.Type != vocab.TypeCheckpoint {
		t.Fatalf("record 5: %v %+v", err, last)
	}
	last.Attrs = recordertest.PrefixAttrs(ts, tm) // the forged claim
	forged, err := json.Marshal(last)
	if err != nil {
		t.Fatal(err)
	}
	lines[5] = append(forged, '\n')
	if err := os.WriteFile(ptyFile(dir, vocab.LogFile), bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := verify(dir, signer.PublicKey())
	if rep.LastVerifiedSeq != 5 || rep.Status != evidence.StatusTampered {
		t.Fatalf("last verified record %d, status %s: the forged checkpoint must still verify (%v)", rep.LastVerifiedSeq, rep.Status, rep.Anomalies)
	}
	if found := anomaliesOf(rep, evidence.KindDataDigestMismatch); len(found) != 1 || found[0] != (evidence.Anomaly{
		Kind: evidence.KindDataDigestMismatch, File: vocab.TypescriptFile, Seq: 3, Offset: header + 7, End: header + 14,
		Expected: sha256Hex([]byte(recordertest.UnfinalizedBody[7:])), Actual: sha256Hex(ts[header+7 : header+14]),
		Msg: fmt.Sprintf("bytes %d..%d differ from the recorded digest", header+7, header+14)}) {
		t.Errorf("data findings %+v, want one on record 3, bytes %d..%d (all: %v)", found, header+7, header+14, rep.Anomalies)
	}
}

// A finalized session whose final checkpoint was removed (or never
// written: the sidecar died while closing) ends in its close record: that
// is a cut log, unfinalized, never a close "not followed by exactly one
// signed checkpoint".
func TestCloseRecordAsTheLastLine(t *testing.T) {
	dir := finalized(t, recorder.Options{Signer: recordertest.Signer()})
	lines := logLines(t, dir)
	if err := os.WriteFile(ptyFile(dir, vocab.LogFile), bytes.Join(lines[:len(lines)-1], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := verify(dir, recordertest.Signer().PublicKey())
	if rep.Status != evidence.StatusUnfinalized || len(rep.Anomalies) != 1 {
		t.Fatalf("status %s, findings %+v; want unfinalized, one finding", rep.Status, rep.Anomalies)
	}
	if a := rep.Anomalies[0]; a.Kind != evidence.KindUnfinalized || a.File != vocab.LogFile || a.Seq != -1 || a.Offset != -1 || a.End != -1 ||
		!strings.Contains(a.Msg, "unfinalized: the close record is the last whole record and no checkpoint signs it") {
		t.Errorf("finding %+v, want %s saying the close record is the last whole record", a, evidence.KindUnfinalized)
	}
}

// Bytes after a finalized session's final checkpoint, a half record
// (no newline) or a line past the record bound: the line is malformed,
// and the close stays followed by a signed checkpoint and more, never
// read as a log cut right after its close record.
func TestLineAfterTheFinalCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name, tail, msg string
		kind            evidence.Kind
	}{
		{"half a record", `{"seq":99,"ty`, "truncated record (no newline)", evidence.KindRecordMalformed},
		{"a line past the bound", strings.Repeat("x", evidence.MaxRecordLine+1) + "\n", "record longer than", evidence.KindRecordMalformed},
		{"a record that does not chain", `{"seq":99,"prev":"00","t":"2026-01-01T00:00:00Z","type":"event"}` + "\n", "sequence 99 where", evidence.KindChainBroken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := finalized(t, recorder.Options{Signer: recordertest.Signer()})
			lines := logLines(t, dir)
			closeSeq := int64(len(lines) - 2)
			logPath := ptyFile(dir, vocab.LogFile)
			st, err := os.Stat(logPath)
			if err != nil {
				t.Fatal(err)
			}
			editFile(t, logPath, func(b []byte) []byte { return append(b, tc.tail...) })
			rep := verify(dir, recordertest.Signer().PublicKey())
			if len(rep.Anomalies) != 2 || rep.Finalized {
				t.Fatalf("finalized %v, findings %+v; want not finalized, a malformed record and an unsigned close", rep.Finalized, rep.Anomalies)
			}
			if a := rep.Anomalies[0]; a.Kind != tc.kind || a.File != vocab.LogFile || a.Seq != closeSeq+2 || a.Offset != st.Size() || !strings.Contains(a.Msg, tc.msg) {
				t.Errorf("finding %+v, want %s at record %d, offset %d: %q", a, tc.kind, closeSeq+2, st.Size(), tc.msg)
			}
			if a := rep.Anomalies[1]; a != (evidence.Anomaly{Kind: evidence.KindCloseUnsigned, File: vocab.LogFile, Seq: closeSeq, Offset: -1, End: -1,
				Msg: "the close record is not followed by exactly one signed checkpoint"}) {
				t.Errorf("finding %+v, want %s at the close record %d", a, evidence.KindCloseUnsigned, closeSeq)
			}
		})
	}
}

// A record no recorder writes, chained after a cut session's last
// checkpoint by anyone with write access: a gap of -1 bytes. It is a
// malformed record (tampered), not a silent end of the chain that would
// leave the session reading as an honest crash (unfinalized).
func TestNegativeLengthRecordIsMalformed(t *testing.T) {
	signer := recordertest.Signer()
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-n", "sess-n", signer, nil, nil)
	lines := logLines(t, dir)
	prev := sha256.Sum256(bytes.TrimSuffix(lines[len(lines)-1], []byte("\n")))
	line, err := json.Marshal(integrity.Record{Seq: uint64(len(lines)), Prev: hex.EncodeToString(prev[:]), Time: time.Unix(1767225602, 0).UTC(),
		Type: vocab.TypeGap, Data: &integrity.Data{Stream: vocab.StreamOut, Off: -1, Len: -1, SHA256: hex.EncodeToString(prev[:])}})
	if err != nil {
		t.Fatal(err)
	}
	logPath := ptyFile(dir, vocab.LogFile)
	st, err := os.Stat(logPath)
	if err != nil {
		t.Fatal(err)
	}
	editFile(t, logPath, func(b []byte) []byte { return append(append(b, line...), '\n') })
	rep := verify(dir, signer.PublicKey())
	found := anomaliesOf(rep, evidence.KindRecordMalformed)
	if rep.Status != evidence.StatusTampered || len(found) != 1 || found[0] != (evidence.Anomaly{Kind: evidence.KindRecordMalformed, File: vocab.LogFile,
		Seq: int64(len(lines)), Offset: st.Size(), End: -1, Msg: "gap record claims -1 bytes"}) {
		t.Errorf("status %s, malformed-record findings %+v; want tampered, one at record %d offset %d (all: %v)", rep.Status, found, len(lines), st.Size(), rep.Anomalies)
	}
	if rep.Records != len(lines) {
		t.Errorf("%d records chain, want %d (not the forged one)", rep.Records, len(lines))
	}
}

// Bytes appended to both files of a finalized session after its close
// (output that never happened, a resize that never happened): each file
// is a finding of its own, located past what the close record vouches
// for; one does not stand for the other.
func TestBothFilesAppendedAfterTheClose(t *testing.T) {
	dir := finalized(t, recorder.Options{Signer: recordertest.Signer()})
	closeSeq := int64(len(logLines(t, dir)) - 2)
	var sizes [2]int64
	for i, name := range []string{vocab.TypescriptFile, vocab.TimingFile} {
		st, err := os.Stat(ptyFile(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sizes[i] = st.Size()
	}
	editFile(t, ptyFile(dir, vocab.TypescriptFile), func(b []byte) []byte { return append(b, "rm -rf /\r\n"...) })
	editFile(t, ptyFile(dir, vocab.TimingFile), func(b []byte) []byte { return append(b, "S 0.100000 SIGWINCH ROWS=1 COLS=1\n"...) })
	ts, tm := sizes[0]+int64(len("rm -rf /\r\n")), sizes[1]+int64(len("S 0.100000 SIGWINCH ROWS=1 COLS=1\n"))
	rep := verify(dir, recordertest.Signer().PublicKey())
	if len(rep.Anomalies) != 2 {
		t.Fatalf("findings %+v, want two", rep.Anomalies)
	}
	if a := rep.Anomalies[0]; a != (evidence.Anomaly{Kind: evidence.KindFileAppended, File: vocab.TypescriptFile, Seq: closeSeq, Offset: sizes[0], End: ts,
		Expected: strconv.FormatInt(sizes[0], 10), Actual: strconv.FormatInt(ts, 10),
		Msg: fmt.Sprintf("file is %d bytes, the close record vouches for %d (bytes appended)", ts, sizes[0])}) {
		t.Errorf("typescript finding %+v, want bytes %d..%d appended", a, sizes[0], ts)
	}
	// The timing finding's offset is not asserted: it is the file's size,
	// not where the appended bytes start (reported to the lead).
	if a := rep.Anomalies[1]; a.Kind != evidence.KindFileAppended || a.File != vocab.TimingFile || a.Seq != closeSeq ||
		a.Msg != fmt.Sprintf("file is %d bytes, the close record vouches for %d (bytes appended)", tm, sizes[1]) {
		t.Errorf("timing finding %+v, want %s at the close record %d, %d bytes where %d are vouched for", a, evidence.KindFileAppended, closeSeq, tm, sizes[1])
	}
}
