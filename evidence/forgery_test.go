package evidence_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
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

// Small cases an examiner would recognise: each is a forgery or an
// accident, and the verdict the verifier owes it. Every case fails if the
// check it names is switched off (issue 27's mutants).

func verify(dir string, keys ...gossh.PublicKey) *evidence.Report {
	return evidence.Verify(dir, evidence.Keys{Trusted: keys}, evidence.Options{})
}

func hasKind(rep *evidence.Report, kind evidence.Kind, file string) bool {
	for _, a := range rep.Anomalies {
		if a.Kind == kind && (file == "" || a.File == file) {
			return true
		}
	}
	return false
}

// anomaliesOf is the report's findings of kind, in order.
func anomaliesOf(rep *evidence.Report, kind evidence.Kind) []evidence.Anomaly {
	var found []evidence.Anomaly
	for _, a := range rep.Anomalies {
		if a.Kind == kind {
			found = append(found, a)
		}
	}
	return found
}

func editFile(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

func ptyFile(dir, name string) string { return filepath.Join(dir, vocab.PTYDir, name) }

// A byte flipped in a cut session's typescript, inside data that no
// checkpoint vouches for yet, is still checked against its data record:
// tampered, not unfinalized.
func TestFlipAfterTheLastCheckpointOfACutSession(t *testing.T) {
	signer := recordertest.Signer()
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-f", "sess-f", signer, nil, nil)
	if rep := verify(dir, signer.PublicKey()); rep.Status != evidence.StatusUnfinalized {
		t.Fatalf("untouched cut session: %s %v", rep.Status, rep.Anomalies)
	}
	off := len(recordertest.UnfinalizedHeader) + 7 + 2 // in the record no checkpoint covers
	editFile(t, ptyFile(dir, vocab.TypescriptFile), func(b []byte) []byte { b[off] ^= 1; return b })
	rep := verify(dir, signer.PublicKey())
	if rep.Status != evidence.StatusTampered || !hasKind(rep, evidence.KindDataDigestMismatch, vocab.TypescriptFile) {
		t.Errorf("a flipped byte after the last checkpoint: %s %v, want tampered with %s", rep.Status, rep.Anomalies, evidence.KindDataDigestMismatch)
	}
}

// A log cut before its first checkpoint is signed through nothing: the
// report says so and vouches for no record.
func TestCutBeforeTheFirstSignature(t *testing.T) {
	signer := recordertest.Signer()
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-c", "sess-c", signer, nil, nil)
	editFile(t, ptyFile(dir, vocab.LogFile), func(b []byte) []byte {
		lines := bytes.SplitAfter(b, []byte("\n"))
		return bytes.Join(lines[:2], nil) // the open and the first data record
	})
	rep := verify(dir, signer.PublicKey())
	if rep.Status != evidence.StatusUnfinalized || rep.LastVerifiedSeq != -1 || rep.LastVerifiedOffset != -1 || rep.SignedRecords != 0 {
		t.Fatalf("cut before any checkpoint: %s, last verified record %d offset %d, %d signed records; want unfinalized, -1, -1, 0",
			rep.Status, rep.LastVerifiedSeq, rep.LastVerifiedOffset, rep.SignedRecords)
	}
	if !strings.Contains(rep.Anomalies[0].Msg, "no trusted checkpoint was written before it ended") {
		t.Errorf("the statement does not say nothing was signed: %v", rep.Anomalies)
	}
}

// One valid timing line appended to a finalized session's timing file
// (a resize that never happened) is tampering: the close record states
// the file's size.
func TestTimingLineAppendedAfterTheClose(t *testing.T) {
	dir := finalized(t, recorder.Options{Signer: recordertest.Signer()})
	editFile(t, ptyFile(dir, vocab.TimingFile), func(b []byte) []byte {
		return append(b, "S 0.100000 SIGWINCH ROWS=1 COLS=1\n"...)
	})
	rep := verify(dir, recordertest.Signer().PublicKey())
	if rep.Status != evidence.StatusTampered || !hasKind(rep, evidence.KindFileAppended, vocab.TimingFile) {
		t.Errorf("a timing line appended after the close: %s %v, want tampered with %s on the timing file", rep.Status, rep.Anomalies, evidence.KindFileAppended)
	}
}

// finalized records a short finalized session and returns its folder.
func finalized(t *testing.T, opts recorder.Options) string {
	t.Helper()
	s, err := recorder.Create(t.TempDir(), recorder.Meta{RunID: "run-1", SessionID: "fin"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"$ ", "echo 0123456789abcdef\r\n", "0123456789abcdef\r\n$ "} {
		if err := s.Output([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	return s.Dir()
}

// A session capped at its transcript size verifies ok and lists the bytes
// it did not store as a size-limit gap of the stream, with their count.
func TestSizeCappedSessionListsItsGap(t *testing.T) {
	dir := finalized(t, recorder.Options{Signer: recordertest.Signer(), MaxBytes: 10})
	rep := verify(dir, recordertest.Signer().PublicKey())
	if !rep.OK() {
		t.Fatalf("a size-capped session: %s %v", rep.Status, rep.Anomalies)
	}
	var unstored int64
	for _, g := range rep.Gaps {
		if g.Reason == vocab.GapSizeLimit && g.Stream == vocab.StreamOut {
			unstored += g.Len
		}
	}
	if total := int64(len("$ echo 0123456789abcdef\r\n0123456789abcdef\r\n$ ")); unstored != total-10 {
		t.Errorf("gaps %+v: %d bytes listed as not stored, want %d", rep.Gaps, unstored, total-10)
	}
}

// A timing-write-failed gap (a record with no data, its stream and count
// in attributes) is listed with them, and the verifier does not stumble
// on its missing data.
func TestTimingWriteFailedGapIsListed(t *testing.T) {
	signer := recordertest.Signer()
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-g", "sess-g", signer, nil, func(w *integrity.Writer) error {
		return w.TimingGap(vocab.StreamOut, 7, errors.New("no space left on device"))
	})
	// The timing file then accounts for the 7 bytes less.
	editFile(t, ptyFile(dir, vocab.TimingFile), func(b []byte) []byte { return b[:len("O 0.100000 7\n")] })
	rep := verify(dir, signer.PublicKey())
	want := evidence.Gap{Seq: 5, Reason: vocab.GapTimingWriteFailed, Stream: vocab.StreamOut, Len: 7, Error: "no space left on device"}
	if len(rep.Gaps) != 1 || rep.Gaps[0] != want {
		t.Fatalf("gaps %+v, want %+v", rep.Gaps, want)
	}
	if rep.Status != evidence.StatusUnfinalized {
		t.Errorf("status %s, want unfinalized (the timing file accounts for the gap): %v", rep.Status, rep.Anomalies)
	}
}

// A session being recorded whose timing file ends in half a line (the
// recorder is mid-write) reads in-progress, not tampered.
func TestLiveSessionWithAHalfWrittenTimingLine(t *testing.T) {
	s, err := recorder.Create(t.TempDir(), recorder.Meta{RunID: "run-1", SessionID: "live"}, recorder.Options{Signer: recordertest.Signer()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(0) })
	if err := s.Output([]byte("some output\r\n")); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(ptyFile(s.Dir(), vocab.TimingFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("O 0.1"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rep := verify(s.Dir(), recordertest.Signer().PublicKey())
	if rep.Status != evidence.StatusInProgress || len(rep.Anomalies) != 0 {
		t.Errorf("a live session mid-write of a timing line: %s %v, want in-progress", rep.Status, rep.Anomalies)
	}
}

// Checkpoints signed by a key the examiner did not give, then ones by a
// trusted key: the first trusted checkpoint says the earlier ones were
// not signed by a trusted key, once, at that checkpoint.
func TestEarlierCheckpointsByAnUntrustedKey(t *testing.T) {
	untrusted, trusted := testutil.NewSigner(), recordertest.Signer()
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-u", "sess-u", untrusted, nil, nil)
	log := ptyFile(dir, vocab.LogFile)
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	sum := sha256.Sum256(bytes.TrimSuffix(lines[len(lines)-1], []byte("\n")))
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := integrity.ContinueWriter(f, "run-u", "sess-u", trusted, func() time.Time { return time.Unix(1767225601, 0) }, uint64(len(lines)), hex.EncodeToString(sum[:]))
	ts := []byte(recordertest.UnfinalizedHeader + recordertest.UnfinalizedBody)
	if err := w.Checkpoint(recordertest.PrefixAttrs(ts, []byte("O 0.100000 7\nO 0.100000 7\n"))); err != nil {
		t.Fatal(err)
	}
	rep := verify(dir, trusted.PublicKey())
	found := anomaliesOf(rep, evidence.KindUntrustedKey)
	if len(found) != 1 || found[0].Seq != int64(len(lines)) || !strings.Contains(found[0].Msg, "the 1 checkpoints before this one are signed by") {
		t.Errorf("untrusted-key findings %+v, want one at record %d saying the 1 earlier checkpoint is not a trusted key's", found, len(lines))
	}
	if rep.Status != evidence.StatusTampered {
		t.Errorf("status %s, want tampered", rep.Status)
	}
}

// sha256Hex is b's digest as the records and findings write it.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
