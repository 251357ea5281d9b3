package evidence_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// recordLong records a finalized session whose typescript spans several
// checkpoints (one every 16 MiB), with input between the output chunks so
// that data records of both streams alternate, and returns its folder and
// where the first byte of each marker lies in the typescript.
func recordLong(t *testing.T) (dir string, ts []byte) {
	t.Helper()
	s, err := recorder.Create(t.TempDir(), recorder.Meta{RunID: "run-1", SessionID: "long"}, recorder.Options{Signer: recordertest.Signer()})
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("output line of the long session\r\n"), 1000)
	for n := 0; n < 40<<20; n += len(chunk) {
		if err := s.Output(chunk); err != nil {
			t.Fatal(err)
		}
		if n%(4<<20) < len(chunk) {
			if err := s.Input([]byte("ls\r")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	ts, err = os.ReadFile(filepath.Join(s.Dir(), vocab.PTYDir, vocab.TypescriptFile))
	if err != nil {
		t.Fatal(err)
	}
	return s.Dir(), ts
}

// copyDir copies a session folder's pty files into a fresh folder of the
// same name.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "run-1", filepath.Base(src))
	if err := os.MkdirAll(filepath.Join(dst, vocab.PTYDir), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{vocab.TypescriptFile, vocab.TimingFile, vocab.LogFile} {
		b, err := os.ReadFile(filepath.Join(src, vocab.PTYDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, vocab.PTYDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func flip(t *testing.T, dir, name string, off int64) {
	t.Helper()
	path := filepath.Join(dir, vocab.PTYDir, name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x20
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestOneFlippedByteIsOneFinding flips one byte at places each vouched for
// differently: the header line (the open record's digest), output in the
// first, a middle and the last window between checkpoints (data records,
// whose digests the one-pass verifier checks one by one only where a
// prefix digest does not match), the trailer line (only the close
// record's file digest covers it), and the timing file (checkpoint
// digests only). Each must be exactly one anomaly, locating the byte
// within a range no longer than a data record (1 MiB), with
// the close record found: the session is finalized and tampered.
func TestOneFlippedByteIsOneFinding(t *testing.T) {
	dir, ts := recordLong(t)
	if rep := evidence.Verify(dir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{}); !rep.OK() || rep.Signed < 3 {
		t.Fatalf("the intact session: OK %v, %d checkpoints, anomalies %v", rep.OK(), rep.Signed, rep.Anomalies)
	}
	header := int64(bytes.IndexByte(ts, '\n'))
	trailer := int64(bytes.LastIndex(ts, []byte("Script done")))
	tm, err := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.TimingFile))
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(ts))
	cases := []struct {
		name string
		file string
		off  int64
		kind evidence.Kind
	}{
		{"header line", vocab.TypescriptFile, header / 2, evidence.KindHeaderMismatch},
		{"first window", vocab.TypescriptFile, header + 1000, evidence.KindDataDigestMismatch},
		{"middle window", vocab.TypescriptFile, size / 2, evidence.KindDataDigestMismatch},
		{"last window", vocab.TypescriptFile, trailer - 10, evidence.KindDataDigestMismatch},
		{"trailer line", vocab.TypescriptFile, trailer + 3, evidence.KindFileDigestMismatch},
		{"timing", vocab.TimingFile, int64(len(tm)) / 2, evidence.KindFileDigestMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := copyDir(t, dir)
			flip(t, d, c.file, c.off)
			rep := evidence.Verify(d, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
			if len(rep.Anomalies) != 1 {
				t.Fatalf("%d anomalies, want 1: %v", len(rep.Anomalies), rep.Anomalies)
			}
			a := rep.Anomalies[0]
			if a.Kind != c.kind || a.File != c.file || a.Offset > c.off || a.End <= c.off || a.End-a.Offset > 1<<20 {
				t.Errorf("anomaly %+v, want %s in %s over a range holding %d", a, c.kind, c.file, c.off)
			}
			if !rep.Finalized || rep.Status != evidence.StatusTampered || rep.OK() {
				t.Errorf("finalized %v, status %s, OK %v; want the close record found and the session tampered", rep.Finalized, rep.Status, rep.OK())
			}
		})
	}
}

// TestTornLineOfALiveSession: a session whose log a recorder holds may
// end in a line being written; it is in progress, not a truncated log.
// Once no recorder holds it, or after the close, the same line is a
// truncated record.
func TestTornLineOfALiveSession(t *testing.T) {
	s, err := recorder.Create(t.TempDir(), recorder.Meta{RunID: "run-1", SessionID: "torn"}, recorder.Options{Signer: recordertest.Signer(), Sync: recorder.SyncStrict})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Output([]byte("hello\r\n")); err != nil {
		t.Fatal(err)
	}
	rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	if rep.Status != evidence.StatusInProgress || len(rep.Anomalies) != 0 || rep.LastVerifiedSeq < 0 || !evidence.Recording(s.Dir()) {
		t.Fatalf("while recording: status %s, last signed record %d, anomalies %v", rep.Status, rep.LastVerifiedSeq, rep.Anomalies)
	}
	logPath := filepath.Join(s.Dir(), vocab.PTYDir, vocab.LogFile)
	st, err := os.Stat(logPath)
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	torn := func() {
		t.Helper()
		if _, err := log.WriteString(`{"seq":99,"ty`); err != nil {
			t.Fatal(err)
		}
	}
	torn()
	if rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{}); rep.Status != evidence.StatusInProgress || len(rep.Anomalies) != 0 {
		t.Errorf("a line being written while recording: status %s, anomalies %v; want in progress", rep.Status, rep.Anomalies)
	}
	if err := os.Truncate(logPath, st.Size()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	if rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{}); rep.Status != evidence.StatusOK || evidence.Recording(s.Dir()) {
		t.Fatalf("after the close: status %s, anomalies %v", rep.Status, rep.Anomalies)
	}
	torn()
	if rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{}); rep.Status != evidence.StatusTampered {
		t.Errorf("a torn last line nobody is writing: status %s, want tampered", rep.Status)
	}
	if err := unix.Flock(int(log.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{}); rep.Status != evidence.StatusTampered {
		t.Errorf("a line after the close and its checkpoint, lock held: status %s, want tampered", rep.Status)
	}
}
