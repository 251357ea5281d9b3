package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// A SIGKILL that lands while the recorder writes a log record that crosses
// a page boundary can leave the record's first pages on disk and not the
// rest (the crash campaign met it: a record cut at offset 15,961 of a log
// whose page ended at 16,384). Such a line is not a record, and a log cut
// at a record boundary would read the same: verify calls the session
// unfinalized, not tampered, and states the line; the recovery states it
// too, signed, and verify holds the log's end to that statement.

// tornLine is the first half of a record as the recorder writes them.
const tornLine = `{"seq":5,"type":"data","time":"2026-01-01T00:00:00Z","prev":"0123456789abcdef`

func appendTorn(t *testing.T, dir, line string) (off int64) {
	t.Helper()
	path := filepath.Join(dir, vocab.PTYDir, vocab.LogFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func wantTorn(t *testing.T, rep *evidence.Report, off int64, line string) {
	t.Helper()
	sum := sha256.Sum256([]byte(line))
	want := evidence.TornLine{Off: off, Len: int64(len(line)), SHA256: hex.EncodeToString(sum[:])}
	if rep.TornLog == nil || *rep.TornLog != want {
		t.Errorf("report's torn log line %+v, want %+v", rep.TornLog, want)
	}
}

func wantStatus(t *testing.T, rep *evidence.Report, status evidence.Status, msg string) {
	t.Helper()
	if rep.Status != status {
		t.Errorf("status %s, want %s: %v", rep.Status, status, rep.Anomalies)
		return
	}
	if msg != "" && !strings.Contains(anomalyText(rep), msg) {
		t.Errorf("no anomaly says %q: %v", msg, rep.Anomalies)
	}
}

func anomalyText(rep *evidence.Report) string {
	var b strings.Builder
	for _, a := range rep.Anomalies {
		b.WriteString(string(a.Kind) + ": " + a.Msg + "\n")
	}
	return b.String()
}

// TestTornLastLineIsACrashCut: an unfinalized session whose log ends in a
// torn line verifies unfinalized and states it; its recovery states the
// same bytes, signed, and verify agrees; a byte added to the line after
// the recovery is tampering, and so is a torn line after a finalized
// session's final checkpoint.
func TestTornLastLineIsACrashCut(t *testing.T) {
	signer := newTestSigner(t)
	keys := []gossh.PublicKey{signer.PublicKey()}
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-t", "sess-t", signer, nil, nil)
	off := appendTorn(t, dir, tornLine)

	rep := evidence.Verify(dir, evidence.Keys{Trusted: keys}, evidence.Options{})
	wantStatus(t, rep, evidence.StatusUnfinalized, "cut mid-write at offset "+strconv.FormatInt(off, 10))
	wantTorn(t, rep, off, tornLine)
	if rep.Records != 5 {
		t.Errorf("%d records chain, want the 5 before the torn line", rep.Records)
	}
	before := mustRead(t, filepath.Join(dir, vocab.PTYDir, vocab.LogFile))

	if err := recordertest.Recover(dir, signer); err != nil {
		t.Fatal(err)
	}
	if after := mustRead(t, filepath.Join(dir, vocab.PTYDir, vocab.LogFile)); !bytes.Equal(after, before) {
		t.Error("the recovery changed the log; it is evidence, left as found")
	}
	var rec integrity.Record
	if err := json.Unmarshal(logLines(mustRead(t, filepath.Join(dir, vocab.PTYDir, vocab.RecoveryFile)))[0], &rec); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(tornLine))
	if rec.Attrs[vocab.AttrLogTornOff] != strconv.FormatInt(off, 10) || rec.Attrs[vocab.AttrLogTornLen] != strconv.Itoa(len(tornLine)) ||
		rec.Attrs[vocab.AttrLogTornSHA256] != hex.EncodeToString(sum[:]) {
		t.Errorf("recovery record %v does not state the torn line (offset %d, %d bytes)", rec.Attrs, off, len(tornLine))
	}
	rep = evidence.Verify(dir, evidence.Keys{Trusted: keys}, evidence.Options{})
	wantStatus(t, rep, evidence.StatusUnfinalized, "the log's last line is a record cut mid-write")
	if !strings.Contains(anomalyText(rep), string(evidence.KindRecovered)) {
		t.Errorf("no recovery statement reported: %v", rep.Anomalies)
	}

	// After the recovery, nothing writes the log: a byte more on the torn
	// line is not what the sidecar found.
	appendTorn(t, dir, "0")
	wantStatus(t, evidence.Verify(dir, evidence.Keys{Trusted: keys}, evidence.Options{}), evidence.StatusTampered, "states the log's torn last line as")

	// A recovery that states no torn line, of a log that has one: the line
	// came after it.
	clean := recordertest.Unfinalized(t, t.TempDir(), "run-t", "sess-c", signer, nil, nil)
	if err := recordertest.Recover(clean, signer); err != nil {
		t.Fatal(err)
	}
	appendTorn(t, clean, tornLine)
	wantStatus(t, evidence.Verify(clean, evidence.Keys{Trusted: keys}, evidence.Options{}), evidence.StatusTampered, "states the log's torn last line as none")

	// Past a finalized session's final checkpoint nothing is written:
	// a torn line there is tampering.
	fin := recordFinalized(t, t.TempDir(), "run-t", "sess-f", signer)
	appendTorn(t, fin, tornLine)
	rep = evidence.Verify(fin, evidence.Keys{Trusted: keys}, evidence.Options{})
	wantStatus(t, rep, evidence.StatusTampered, "truncated record (no newline)")
	if rep.TornLog != nil {
		t.Errorf("a line after the final checkpoint reported as a crash cut: %+v", rep.TornLog)
	}
}

// TestCutWhileFinalizing: a crash between the close record and its
// checkpoint (the checkpoint not written, or torn) leaves a session that
// is unfinalized, not tampered; its recovery continues the chain after
// the close record and verifies.
func TestCutWhileFinalizing(t *testing.T) {
	signer := newTestSigner(t)
	keys := []gossh.PublicKey{signer.PublicKey()}
	for _, tc := range []struct {
		name string
		cut  func(last []byte) string // what is left of the final checkpoint's line
	}{
		{"checkpoint not written", func([]byte) string { return "" }},
		{"checkpoint torn", func(last []byte) string { return string(last[:len(last)/2]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := recordFinalized(t, t.TempDir(), "run-f", "sess-f", signer)
			// The manifest follows the final checkpoint: a crash before
			// that checkpoint leaves none.
			for _, name := range []string{vocab.ManifestFile, vocab.ManifestSigFile} {
				if err := os.Remove(filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			var torn string
			edit(t, dir, vocab.LogFile, func(b []byte) []byte {
				ls := logLines(b)
				torn = tc.cut(ls[len(ls)-1])
				return append(joinLines(ls[:len(ls)-1]), torn...)
			})
			rep := evidence.Verify(dir, evidence.Keys{Trusted: keys}, evidence.Options{})
			wantStatus(t, rep, evidence.StatusUnfinalized, "the close record is the last whole record and no checkpoint signs it")
			if (rep.TornLog != nil) != (torn != "") {
				t.Errorf("torn log line %+v, with %d torn bytes", rep.TornLog, len(torn))
			}
			if err := recordertest.Recover(dir, signer); err != nil {
				t.Fatal(err)
			}
			rep = evidence.Verify(dir, evidence.Keys{Trusted: keys}, evidence.Options{})
			wantStatus(t, rep, evidence.StatusUnfinalized, "")
			if !strings.Contains(anomalyText(rep), string(evidence.KindRecovered)) || strings.Contains(anomalyText(rep), string(evidence.KindRecoveryInvalid)) {
				t.Errorf("want a valid recovery statement: %v", rep.Anomalies)
			}
		})
	}
}
