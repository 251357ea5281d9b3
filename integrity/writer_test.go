package integrity

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	gossh "golang.org/x/crypto/ssh"
)

// The writer's records as a verifier reads them back: what each of its
// calls puts in the log, byte for byte where it matters. Each case is one
// thing a session's record must say.

const (
	testRun  = "run-w"
	testSess = "sess-w"
)

var testTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// writeLog runs steps against a writer on a fresh log file and returns
// the log's records, read back and chained (readChain).
func writeLog(t *testing.T, steps func(w *Writer)) []Record {
	t.Helper()
	path := filepath.Join(t.TempDir(), "integrity.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(f, testRun, testSess, newSigner(t), func() time.Time { return testTime })
	if err := w.Append(vocab.TypeOpen, map[string]string{vocab.AttrRunID: testRun}); err != nil {
		t.Fatal(err)
	}
	steps(w)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return readChain(t, path, testRun, testSess)
}

func digest(p string) string {
	sum := sha256.Sum256([]byte(p))
	return hex.EncodeToString(sum[:])
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestDataIsCoalescedAndDigested: contiguous chunks of one stream are one
// data record with their offset, length and digest; another stream, or a
// chunk that does not follow, starts a new one.
func TestDataIsCoalescedAndDigested(t *testing.T) {
	recs := writeLog(t, func(w *Writer) {
		must(t, w.Data(vocab.StreamOut, 100, []byte("hello ")))
		must(t, w.Data(vocab.StreamOut, 106, []byte("world")))
		must(t, w.Data(vocab.StreamIn, 111, []byte("ls\r")))
		must(t, w.Data(vocab.StreamOut, 200, []byte("far")))
	})
	want := []Data{
		{Stream: vocab.StreamOut, Off: 100, Len: 11, SHA256: digest("hello world")},
		{Stream: vocab.StreamIn, Off: 111, Len: 3, SHA256: digest("ls\r")},
		{Stream: vocab.StreamOut, Off: 200, Len: 3, SHA256: digest("far")},
	}
	if len(recs) != 1+len(want) {
		t.Fatalf("%d records, want the open record and %d data records: %+v", len(recs), len(want), recs)
	}
	for i, d := range want {
		r := recs[1+i]
		if r.Type != vocab.TypeData || r.Data == nil || *r.Data != d {
			t.Errorf("record %d: %s %+v, want data %+v", 1+i, r.Type, r.Data, d)
		}
	}
}

// TestBytesPastTheSizeLimitAreAGap: data counted at offset -1 (the
// transcript at its size limit) is a gap record, size-limit, not stored,
// with the digest of the bytes that were not stored.
func TestBytesPastTheSizeLimitAreAGap(t *testing.T) {
	recs := writeLog(t, func(w *Writer) {
		must(t, w.Data(vocab.StreamOut, 0, []byte("kept")))
		must(t, w.Data(vocab.StreamOut, -1, []byte("not ")))
		must(t, w.Data(vocab.StreamOut, -1, []byte("stored")))
	})
	if len(recs) != 3 {
		t.Fatalf("%d records: %+v", len(recs), recs)
	}
	g := recs[2]
	want := Data{Stream: vocab.StreamOut, Off: -1, Len: 10, SHA256: digest("not stored")}
	if g.Type != vocab.TypeGap || g.Data == nil || *g.Data != want || g.Attrs[vocab.AttrReason] != vocab.GapSizeLimit || g.Attrs["stored"] != "false" {
		t.Errorf("size-limit record %s %+v %v, want a gap %+v, reason %s, stored false", g.Type, g.Data, g.Attrs, want, vocab.GapSizeLimit)
	}
}

// TestWriteFailureGaps: bytes a failed typescript write lost are a gap
// record at once, with their digest and offset -1 and the reason given;
// stored bytes whose timing line failed are a timing-write-failed gap
// naming the stream, the count and the error.
func TestWriteFailureGaps(t *testing.T) {
	recs := writeLog(t, func(w *Writer) {
		must(t, w.Data(vocab.StreamOut, 0, []byte("before")))
		must(t, w.Gap(vocab.StreamOut, []byte("lost bytes"), map[string]string{vocab.AttrReason: vocab.GapWriteFailed}))
		must(t, w.TimingGap(vocab.StreamErr, 42, errors.New("no space left on device")))
	})
	if len(recs) != 4 {
		t.Fatalf("%d records, want open, data, gap, timing gap: %+v", len(recs), recs)
	}
	if d := recs[1]; d.Type != vocab.TypeData || d.Data.Len != 6 {
		t.Errorf("the data before the gap is not flushed first: %+v", d)
	}
	lost := recs[2]
	want := Data{Stream: vocab.StreamOut, Off: -1, Len: 10, SHA256: digest("lost bytes")}
	if lost.Type != vocab.TypeGap || lost.Data == nil || *lost.Data != want || lost.Attrs[vocab.AttrReason] != vocab.GapWriteFailed {
		t.Errorf("lost bytes: %s %+v %v, want a gap %+v with reason %s", lost.Type, lost.Data, lost.Attrs, want, vocab.GapWriteFailed)
	}
	tg := recs[3]
	if tg.Type != vocab.TypeGap || tg.Data != nil || tg.Attrs[vocab.AttrReason] != vocab.GapTimingWriteFailed ||
		tg.Attrs[vocab.AttrStream] != vocab.StreamErr || tg.Attrs["len"] != "42" || tg.Attrs[vocab.AttrError] != "no space left on device" {
		t.Errorf("timing gap: %s %+v %v", tg.Type, tg.Data, tg.Attrs)
	}
}

// TestCheckpointSignsTheHead: a checkpoint's signature verifies with the
// signer's key over the head it follows (run, session, the last record's
// seq and hash), and over nothing else; one before the open record is
// refused.
func TestCheckpointSignsTheHead(t *testing.T) {
	signer := newSigner(t)
	var buf bytes.Buffer
	w := NewWriter(&buf, testRun, testSess, signer, func() time.Time { return testTime })
	if err := w.Checkpoint(nil); err == nil || !strings.Contains(err.Error(), "before the open record") {
		t.Fatalf("checkpoint before the open record: %v", err)
	}
	must(t, w.Append(vocab.TypeOpen, nil))
	must(t, w.Data(vocab.StreamOut, 0, []byte("x")))
	must(t, w.Checkpoint(map[string]string{vocab.AttrTSSize: "1"}))
	if w.Seq() != 3 {
		t.Fatalf("Seq %d after 3 records", w.Seq())
	}
	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	var cp Record
	if len(lines) != 3 || unmarshal(lines[2], &cp) != nil || cp.Type != vocab.TypeCheckpoint || cp.Attrs[vocab.AttrTSSize] != "1" {
		t.Fatalf("log %q: want open, data, checkpoint", buf.String())
	}
	sum := sha256.Sum256(lines[1])
	head := hex.EncodeToString(sum[:])
	if cp.Prev != head {
		t.Fatalf("checkpoint prev %s, want the data record's hash %s", cp.Prev, head)
	}
	pub, err := VerifySSHSIG(cp.Sig, HeadNamespace, HeadMessage(testRun, testSess, 1, head))
	if err != nil || !bytes.Equal(pub.Marshal(), signer.PublicKey().Marshal()) {
		t.Fatalf("checkpoint signature over the head: %v", err)
	}
	for name, msg := range map[string][]byte{
		"another seq":     HeadMessage(testRun, testSess, 2, head),
		"another session": HeadMessage(testRun, "other", 1, head),
		"another head":    HeadMessage(testRun, testSess, 1, Seed(testRun, testSess)),
	} {
		if _, err := VerifySSHSIG(cp.Sig, HeadNamespace, msg); err == nil {
			t.Errorf("the signature verifies over %s", name)
		}
	}
}

// TestContinueWriterFollowsTheChain: a recovery's writer continues from
// the seq and hash it is given.
func TestContinueWriterFollowsTheChain(t *testing.T) {
	var buf bytes.Buffer
	w := ContinueWriter(&buf, testRun, testSess, newSigner(t), func() time.Time { return testTime }, 7, "abc")
	must(t, w.Append(vocab.TypeRecovery, nil))
	var r Record
	if err := unmarshal(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), &r); err != nil || r.Seq != 7 || r.Prev != "abc" || w.Seq() != 8 {
		t.Fatalf("continued record %+v (%v), Seq %d", r, err, w.Seq())
	}
}

func unmarshal(line []byte, r *Record) error { return json.Unmarshal(line, r) }

// TestCoalescingBounds: a stored chunk never joins a pending gap, nor a
// gap a stored chunk, data at offset 0 is data (an empty chunk there joins
// the bytes that follow it), and a data record holds at
// most maxCoalesce bytes: a chunk that would pass it starts a new record.
func TestCoalescingBounds(t *testing.T) {
	big := bytes.Repeat([]byte("x"), maxCoalesce)
	type rec struct {
		typ string
		off int64
		n   int64
	}
	for _, tc := range []struct {
		name  string
		steps func(w *Writer)
		want  []rec
	}{
		{"stored after unstored", func(w *Writer) {
			must(t, w.Data(vocab.StreamOut, -1, []byte("ab")))
			must(t, w.Data(vocab.StreamOut, 0, []byte("cd")))
		}, []rec{{vocab.TypeGap, -1, 2}, {vocab.TypeData, 0, 2}}},
		{"unstored after stored at offset 0", func(w *Writer) {
			must(t, w.Data(vocab.StreamOut, 0, []byte("ab")))
			must(t, w.Data(vocab.StreamOut, -1, []byte("cd")))
		}, []rec{{vocab.TypeData, 0, 2}, {vocab.TypeGap, -1, 2}}},
		{"an empty chunk at offset 0, then its bytes", func(w *Writer) {
			must(t, w.Data(vocab.StreamOut, 0, nil))
			must(t, w.Data(vocab.StreamOut, 0, []byte("ab")))
		}, []rec{{vocab.TypeData, 0, 2}}},
		{"up to the bound", func(w *Writer) {
			must(t, w.Data(vocab.StreamOut, 10, big[1:]))
			must(t, w.Data(vocab.StreamOut, 10+maxCoalesce-1, []byte("y")))
		}, []rec{{vocab.TypeData, 10, maxCoalesce}}},
		{"past the bound", func(w *Writer) {
			must(t, w.Data(vocab.StreamOut, 10, big))
			must(t, w.Data(vocab.StreamOut, 10+maxCoalesce, []byte("y")))
		}, []rec{{vocab.TypeData, 10, maxCoalesce}, {vocab.TypeData, 10 + maxCoalesce, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := writeLog(t, tc.steps)[1:]
			var got []rec
			for _, r := range recs {
				got = append(got, rec{r.Type, r.Data.Off, r.Data.Len})
				if r.Type == vocab.TypeData && len(r.Attrs) != 0 {
					t.Errorf("data record at %d carries attributes %v: only a gap says why", r.Data.Off, r.Attrs)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("records %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSSHSIGRefusals: what is not a well-formed SSHSIG of this namespace,
// version and hash is refused, each with its reason, before any signature
// math.
func TestSSHSIGRefusals(t *testing.T) {
	signer := newSigner(t)
	msg := []byte("head")
	good, err := SignSSHSIG(signer, HeadNamespace, msg)
	if err != nil {
		t.Fatal(err)
	}
	armor := func(blob []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: sshsigPEMType, Bytes: blob}))
	}
	blob := func(edit func(b *sshsigBlob)) string {
		b := sshsigBlob{Version: sshsigVersion, PublicKey: signer.PublicKey().Marshal(), Namespace: HeadNamespace, HashAlg: sshsigHash, Signature: []byte("x")}
		edit(&b)
		return armor(append([]byte(sshsigMagic), gossh.Marshal(b)...))
	}
	for _, tc := range []struct {
		name, armored, namespace, want string
	}{
		{"not armored", "garbage", HeadNamespace, "not an armored SSH signature"},
		{"another PEM type", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("x")})), HeadNamespace, "not an armored SSH signature"},
		{"bad magic", armor([]byte("SSHSIX")), HeadNamespace, "bad magic"},
		{"truncated blob", armor([]byte(sshsigMagic + "\x00\x00")), HeadNamespace, "sshsig: "},
		{"version 2", blob(func(b *sshsigBlob) { b.Version = 2 }), HeadNamespace, "version 2"},
		{"another namespace", good, "file", `namespace "aptl-kali-capture-head", want "file"`},
		{"sha256", blob(func(b *sshsigBlob) { b.HashAlg = "sha256" }), HeadNamespace, `hash "sha256"`},
		{"bad public key", blob(func(b *sshsigBlob) { b.PublicKey = []byte("nope") }), HeadNamespace, "public key"},
		{"bad signature encoding", blob(func(b *sshsigBlob) {}), HeadNamespace, "signature:"},
		{"another message", good, HeadNamespace, "does not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := msg
			if tc.name == "another message" {
				m = []byte("other head")
			}
			if _, err := VerifySSHSIG(tc.armored, tc.namespace, m); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := VerifySSHSIG(good, HeadNamespace, msg); err != nil {
		t.Fatalf("the good signature: %v", err)
	}
}
