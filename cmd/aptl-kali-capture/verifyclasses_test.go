//go:build linux

// The sessions these tests verify are made by the recorder and signed by
// recordertest's key, which are Linux only.

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// The verdicts of verify --json in classes: one damaged copy of a
// recorded session per class, each run through the verify command itself
// (runVerify), and what its JSON says of the finding: the class, where it
// is (file, record, offset) and the two values compared; and the
// summaries by class, per session and overall.

// finding is an anomaly as verify --json prints it.
type finding struct {
	Class    string `json:"class"`
	Kind     string `json:"kind"`
	File     string `json:"file"`
	Record   int64  `json:"record"`
	Offset   int64  `json:"offset"`
	End      int64  `json:"end"`
	Expected string `json:"expected"`
	Actual   string `json:"actual"`
	Msg      string `json:"msg"`
}

type classCount struct {
	Class string `json:"class"`
	Count int    `json:"count"`
}

type classDoc struct {
	OK  bool `json:"ok"`
	Run *struct {
		Anomalies []finding `json:"anomalies"`
	} `json:"run"`
	Sessions []struct {
		Dir       string    `json:"dir"`
		Status    string    `json:"status"`
		Anomalies []finding `json:"anomalies"`
		Reconcile []finding `json:"reconcile"`
		Gaps      []struct {
			Class string `json:"class"`
		} `json:"gaps"`
		Summary []classCount `json:"summary"`
	} `json:"sessions"`
	Summary []classCount `json:"summary"`
}

// runVerifyCaptured runs the verify command with args and returns what it
// printed on stdout and stderr, and its exit status.
func runVerifyCaptured(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	outF, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	errF, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = outF, errF
	code = runVerify(args)
	os.Stdout, os.Stderr = oldOut, oldErr
	o, _ := os.ReadFile(outF.Name())
	e, _ := os.ReadFile(errF.Name())
	outF.Close()
	errF.Close()
	return string(o), string(e), code
}

// verifyClassJSON runs verify --json --key pub args and decodes it.
func verifyClassJSON(t *testing.T, pub string, args ...string) (classDoc, int) {
	t.Helper()
	out, errOut, code := runVerifyCaptured(t, append([]string{"--json", "--key", pub}, args...)...)
	var doc classDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("verify --json %v: %v\n%s\n%s", args, err, out, errOut)
	}
	if strings.Contains(out, `"started":"0001-01-01`) {
		t.Errorf("verify --json %v states a zero start time:\n%s", args, out)
	}
	return doc, code
}

// pubFile writes key as a .pub file and returns its path.
func pubFile(t *testing.T, key gossh.PublicKey) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "host.pub")
	if err := os.WriteFile(p, gossh.MarshalAuthorizedKey(key), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// recordedSession records a short finalized session under root/run/id.
func recordedSession(t *testing.T, root, run, id string, opts recorder.Options) string {
	t.Helper()
	opts.Signer = recordertest.Signer()
	s, err := recorder.Create(root, recorder.Meta{RunID: run, SessionID: id}, opts)
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

// logLine is one record of a session's log, with its byte offset.
type logLine struct {
	off  int64
	text []byte
	rec  integrity.Record
}

func readLog(t *testing.T, dir string) []logLine {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []logLine
	off := int64(0)
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var r integrity.Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, logLine{off, l, r})
		off += int64(len(l))
	}
	return out
}

func writeLog(t *testing.T, dir string, lines []logLine) {
	t.Helper()
	var b []byte
	for _, l := range lines {
		b = append(b, l.text...)
	}
	if err := os.WriteFile(filepath.Join(dir, vocab.PTYDir, vocab.LogFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// firstStored is the first data record whose bytes the typescript stores.
func firstStored(t *testing.T, lines []logLine) logLine {
	t.Helper()
	for _, l := range lines {
		if l.rec.Type == vocab.TypeData && l.rec.Data != nil && l.rec.Data.Off >= 0 && l.rec.Data.Len > 2 {
			return l
		}
	}
	t.Fatal("no stored data record")
	return logLine{}
}

func lastOfType(t *testing.T, lines []logLine, typ string) logLine {
	t.Helper()
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i].rec.Type == typ {
			return lines[i]
		}
	}
	t.Fatalf("no %s record", typ)
	return logLine{}
}

func hexDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func ptyPath(dir, name string) string { return filepath.Join(dir, vocab.PTYDir, name) }

func edit(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// signedClose appends to an Unfinalized session a close record with
// closeAttrs over the prefix attributes of ts and tm, and its checkpoint:
// a finalized session whose close says what the caller makes it say,
// signed by the host key.
func signedClose(ts, tm []byte, closeAttrs map[string]string) func(*integrity.Writer) error {
	return func(w *integrity.Writer) error {
		attrs := recordertest.PrefixAttrs(ts, tm)
		for k, v := range closeAttrs {
			attrs[k] = v
		}
		if err := w.Append(vocab.TypeClose, attrs); err != nil {
			return err
		}
		return w.Checkpoint(recordertest.PrefixAttrs(ts, tm))
	}
}

// classCase is one damaged copy and the one finding it must be reported as.
type classCase struct {
	class string
	want  func(t *testing.T) (dir string, want finding, keyOf gossh.PublicKey)
}

func TestVerifyJSONClassPerFinding(t *testing.T) {
	signer := recordertest.Signer()
	body := []byte(recordertest.UnfinalizedHeader + recordertest.UnfinalizedBody)
	cases := []classCase{
		{vocab.FindingChecksumMismatch, func(t *testing.T) (string, finding, gossh.PublicKey) {
			dir := recordedSession(t, t.TempDir(), "run-c", "sess-c", recorder.Options{})
			d := firstStored(t, readLog(t, dir))
			var flipped []byte
			edit(t, ptyPath(dir, vocab.TypescriptFile), func(b []byte) []byte {
				b[d.rec.Data.Off+1] ^= 1
				flipped = append(flipped, b[d.rec.Data.Off:d.rec.Data.Off+d.rec.Data.Len]...)
				return b
			})
			return dir, finding{Kind: string(evidence.KindDataDigestMismatch), File: vocab.TypescriptFile, Record: int64(d.rec.Seq),
				Offset: d.rec.Data.Off, End: d.rec.Data.Off + d.rec.Data.Len, Expected: d.rec.Data.SHA256, Actual: hexDigest(flipped)}, nil
		}},
		{vocab.FindingMissingFile, func(t *testing.T) (string, finding, gossh.PublicKey) {
			dir := recordedSession(t, t.TempDir(), "run-m", "sess-m", recorder.Options{})
			if err := os.Remove(ptyPath(dir, vocab.TimingFile)); err != nil {
				t.Fatal(err)
			}
			return dir, finding{Kind: string(evidence.KindFileUnreadable), File: vocab.TimingFile, Record: -1, Offset: -1, End: -1}, nil
		}},
		{vocab.FindingTruncation, func(t *testing.T) (string, finding, gossh.PublicKey) {
			dir := recordedSession(t, t.TempDir(), "run-t", "sess-t", recorder.Options{})
			d := firstStored(t, readLog(t, dir))
			cut := d.rec.Data.Off + 1
			edit(t, ptyPath(dir, vocab.TypescriptFile), func(b []byte) []byte { return b[:cut] })
			end := d.rec.Data.Off + d.rec.Data.Len
			return dir, finding{Kind: string(evidence.KindFileTruncated), File: vocab.TypescriptFile, Record: int64(d.rec.Seq),
				Offset: cut, End: end, Expected: strconv.FormatInt(end, 10), Actual: strconv.FormatInt(cut, 10)}, nil
		}},
		{vocab.FindingUnvouched, func(t *testing.T) (string, finding, gossh.PublicKey) {
			dir := recordedSession(t, t.TempDir(), "run-u", "sess-u", recorder.Options{})
			size := fileSize(t, ptyPath(dir, vocab.TypescriptFile))
			edit(t, ptyPath(dir, vocab.TypescriptFile), func(b []byte) []byte { return append(b, "rm -rf /\r\n"...) })
			closeRec := lastOfType(t, readLog(t, dir), vocab.TypeClose)
			return dir, finding{Kind: string(evidence.KindFileAppended), File: vocab.TypescriptFile, Record: int64(closeRec.rec.Seq),
				Offset: size, End: size + 10, Expected: strconv.FormatInt(size, 10), Actual: strconv.FormatInt(size+10, 10)}, nil
		}},
		{vocab.FindingInvalidSignature, func(t *testing.T) (string, finding, gossh.PublicKey) {
			dir := recordedSession(t, t.TempDir(), "run-s", "sess-s", recorder.Options{})
			lines := readLog(t, dir)
			last := &lines[len(lines)-1]
			// One character of the final checkpoint's armored signature
			// changed, the record still in the form the sidecar writes.
			r := last.rec
			i := strings.Index(r.Sig, "\n") + 10
			r.Sig = r.Sig[:i] + string(r.Sig[i]^1) + r.Sig[i+1:]
			text, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			last.text = append(text, '\n')
			writeLog(t, dir, lines)
			return dir, finding{Kind: string(evidence.KindSignatureInvalid), File: vocab.LogFile, Record: int64(r.Seq), Offset: last.off, End: -1}, nil
		}},
		{vocab.FindingUntrustedKey, func(t *testing.T) (string, finding, gossh.PublicKey) {
			dir := recordedSession(t, t.TempDir(), "run-k", "sess-k", recorder.Options{})
			return dir, finding{Kind: string(evidence.KindUntrustedKey), File: vocab.LogFile, Record: -1, Offset: -1, End: -1}, testutil.NewSigner().PublicKey()
		}},
		{vocab.FindingMalformedFileContent, func(t *testing.T) (string, finding, gossh.PublicKey) {
			dir := recordedSession(t, t.TempDir(), "run-f", "sess-f", recorder.Options{})
			lines := readLog(t, dir)
			size := fileSize(t, ptyPath(dir, vocab.LogFile))
			edit(t, ptyPath(dir, vocab.LogFile), func(b []byte) []byte { return append(b, "{\"seq\":\n"...) })
			return dir, finding{Kind: string(evidence.KindRecordMalformed), File: vocab.LogFile, Record: int64(len(lines)), Offset: size, End: -1}, nil
		}},
		{vocab.FindingChainBreak, func(t *testing.T) (string, finding, gossh.PublicKey) {
			dir := recordedSession(t, t.TempDir(), "run-b", "sess-b", recorder.Options{})
			lines := readLog(t, dir)
			d := firstStored(t, lines)
			var kept []logLine
			for _, l := range lines {
				if l.rec.Seq != d.rec.Seq {
					kept = append(kept, l)
				}
			}
			writeLog(t, dir, kept)
			return dir, finding{Kind: string(evidence.KindChainBroken), File: vocab.LogFile, Record: int64(d.rec.Seq), Offset: d.off, End: -1,
				Expected: strconv.FormatUint(d.rec.Seq, 10), Actual: strconv.FormatUint(d.rec.Seq+1, 10)}, nil
		}},
		{vocab.FindingCountMismatch, func(t *testing.T) (string, finding, gossh.PublicKey) {
			tm := []byte("O 0.100000 7\nO 0.100000 7\n")
			dir := recordertest.Unfinalized(t, t.TempDir(), "run-n", "sess-n", signer, nil, signedClose(body, tm,
				map[string]string{vocab.AttrCloseBytes + vocab.StreamIn: "0", vocab.AttrCloseBytes + vocab.StreamOut: "99", vocab.AttrCloseBytes + vocab.StreamErr: "0"}))
			closeRec := lastOfType(t, readLog(t, dir), vocab.TypeClose)
			return dir, finding{Kind: string(evidence.KindCountMismatch), File: vocab.LogFile, Record: int64(closeRec.rec.Seq), Offset: -1, End: -1,
				Expected: "99", Actual: strconv.Itoa(len(recordertest.UnfinalizedBody))}, nil
		}},
		{vocab.FindingTimingMismatch, func(t *testing.T) (string, finding, gossh.PublicKey) {
			// The timing file accounts for the first 7 bytes only, and the
			// signed close vouches for it as it is.
			tm := []byte("O 0.100000 7\n")
			root := t.TempDir()
			dir := recordertest.Unfinalized(t, root, "run-i", "sess-i", signer, nil, func(w *integrity.Writer) error {
				if err := os.WriteFile(ptyPath(filepath.Join(root, "run-i", "sess-i"), vocab.TimingFile), tm, 0o600); err != nil {
					return err
				}
				return signedClose(body, tm, map[string]string{vocab.AttrCloseBytes + vocab.StreamIn: "0",
					vocab.AttrCloseBytes + vocab.StreamOut: strconv.Itoa(len(recordertest.UnfinalizedBody)), vocab.AttrCloseBytes + vocab.StreamErr: "0"})(w)
			})
			closeRec := lastOfType(t, readLog(t, dir), vocab.TypeClose)
			return dir, finding{Kind: string(evidence.KindTimingTotals), File: vocab.TimingFile, Record: int64(closeRec.rec.Seq), Offset: int64(len(tm)), End: -1,
				Expected: strconv.Itoa(len(recordertest.UnfinalizedBody)), Actual: "7"}, nil
		}},
		{vocab.FindingUnfinalized, func(t *testing.T) (string, finding, gossh.PublicKey) {
			dir := recordertest.Unfinalized(t, t.TempDir(), "run-x", "sess-x", signer, nil, nil)
			cp := lastOfType(t, readLog(t, dir), vocab.TypeCheckpoint)
			return dir, finding{Kind: string(evidence.KindUnfinalized), File: vocab.LogFile, Record: int64(cp.rec.Seq), Offset: -1, End: -1}, nil
		}},
	}
	// Every class has its fixture: here, or in the tests below that need
	// a run or a clean session.
	covered := []string{vocab.FindingGapRecorded, vocab.FindingForeignEvidence, vocab.FindingTeeMismatch, vocab.FindingNotASession}
	for _, tc := range cases {
		covered = append(covered, tc.class)
	}
	slices.Sort(covered)
	if all := slices.Sorted(slices.Values(vocab.FindingClasses)); !slices.Equal(covered, all) {
		t.Errorf("fixtures cover the classes %v, vocab lists %v", covered, all)
	}
	for _, tc := range cases {
		t.Run(tc.class, func(t *testing.T) {
			dir, want, key := tc.want(t)
			if key == nil {
				key = signer.PublicKey()
			}
			doc, code := verifyClassJSON(t, pubFile(t, key), dir)
			if code != exitFailure || doc.OK || len(doc.Sessions) != 1 {
				t.Fatalf("exit %d, ok %v, %d sessions; want %d, false, 1", code, doc.OK, len(doc.Sessions), exitFailure)
			}
			s := doc.Sessions[0]
			var got *finding
			for i, a := range s.Anomalies {
				if a.Kind == want.Kind {
					got = &s.Anomalies[i]
					break
				}
			}
			if got == nil {
				t.Fatalf("no %s finding: %+v", want.Kind, s.Anomalies)
			}
			want.Class, want.Msg = tc.class, got.Msg
			if *got != want {
				t.Errorf("finding\n %+v\nwant\n %+v", *got, want)
			}
			wantStatus := evidence.StatusTampered
			if tc.class == vocab.FindingUnfinalized {
				wantStatus = evidence.StatusUnfinalized
			}
			if s.Status != string(wantStatus) {
				t.Errorf("status %s, want %s", s.Status, wantStatus)
			}
			checkSummaries(t, doc)
			if !hasCount(s.Summary, tc.class) {
				t.Errorf("the session's summary %+v does not count %s", s.Summary, tc.class)
			}
		})
	}
}

// checkSummaries holds each session's summary, and the document's, to the
// findings the document lists, class by class.
func checkSummaries(t *testing.T, doc classDoc) {
	t.Helper()
	all := map[string]int{}
	if doc.Run != nil {
		for _, a := range doc.Run.Anomalies {
			all[a.Class]++
		}
	}
	for _, s := range doc.Sessions {
		count := map[string]int{}
		for _, a := range append(append([]finding(nil), s.Anomalies...), s.Reconcile...) {
			count[a.Class]++
		}
		for _, g := range s.Gaps {
			count[g.Class]++
		}
		sameCounts(t, "session "+s.Dir, s.Summary, count)
		for c, n := range count {
			all[c] += n
		}
	}
	sameCounts(t, "the document", doc.Summary, all)
}

func sameCounts(t *testing.T, what string, summary []classCount, want map[string]int) {
	t.Helper()
	got := map[string]int{}
	last := -1
	for _, c := range summary {
		got[c.Class] = c.Count
		i := indexOf(vocab.FindingClasses, c.Class)
		if i <= last || c.Count <= 0 {
			t.Errorf("%s: summary %+v is not vocab's classes in order, each counted", what, summary)
		}
		last = i
	}
	if len(got) != len(want) {
		t.Errorf("%s: summary %+v, the findings count %v", what, summary, want)
	}
	for c, n := range want {
		if got[c] != n {
			t.Errorf("%s: summary %+v, the findings count %v", what, summary, want)
			break
		}
	}
}

func indexOf(list []string, s string) int {
	for i, e := range list {
		if e == s {
			return i
		}
	}
	return -2
}

func hasCount(summary []classCount, class string) bool {
	for _, c := range summary {
		if c.Class == class && c.Count > 0 {
			return true
		}
	}
	return false
}

// A size-capped session's gaps are GapRecorded, listed in gaps and counted
// in the summaries, never among the anomalies: the session is ok, exit 0.
func TestVerifyJSONGapRecordedIsNoFailure(t *testing.T) {
	dir := recordedSession(t, t.TempDir(), "run-g", "sess-g", recorder.Options{MaxBytes: 10})
	doc, code := verifyClassJSON(t, pubFile(t, recordertest.Signer().PublicKey()), dir)
	if code != exitOK || !doc.OK || len(doc.Sessions) != 1 {
		t.Fatalf("exit %d, ok %v, %d sessions; want %d, true, 1", code, doc.OK, len(doc.Sessions), exitOK)
	}
	s := doc.Sessions[0]
	if s.Status != string(evidence.StatusOK) || len(s.Anomalies) != 0 || len(s.Gaps) == 0 {
		t.Fatalf("status %s, anomalies %+v, %d gaps; want ok, none, some", s.Status, s.Anomalies, len(s.Gaps))
	}
	for _, g := range s.Gaps {
		if g.Class != vocab.FindingGapRecorded {
			t.Errorf("gap class %q, want %s", g.Class, vocab.FindingGapRecorded)
		}
	}
	want := []classCount{{vocab.FindingGapRecorded, len(s.Gaps)}}
	if len(s.Summary) != 1 || s.Summary[0] != want[0] || len(doc.Summary) != 1 || doc.Summary[0] != want[0] {
		t.Errorf("summaries %+v and %+v, want %+v", s.Summary, doc.Summary, want)
	}
}

// A session of another run among a run's sessions is ForeignEvidence, in
// the session's reconcile list; a harvest's tee that differs from what
// the session recorded is TeeMismatch. Both fail the run (exit 1) and are
// counted in the session's summary and the document's.
func TestVerifyJSONRunLevelClasses(t *testing.T) {
	pub := pubFile(t, recordertest.Signer().PublicKey())
	t.Run(vocab.FindingForeignEvidence, func(t *testing.T) {
		root := t.TempDir()
		recordedSession(t, root, "run-a", "sess-1", recorder.Options{})
		recordedSession(t, root, "run-a", "sess-2", recorder.Options{})
		moved := recordedSession(t, root, "run-b", "sess-3", recorder.Options{})
		if err := os.Rename(moved, filepath.Join(root, "run-a", "sess-3")); err != nil {
			t.Fatal(err)
		}
		doc, code := verifyClassJSON(t, pub, "--run-dir", filepath.Join(root, "run-a"))
		wantRunClass(t, doc, code, vocab.FindingForeignEvidence, string(evidence.KindRunMismatch), filepath.Join(root, "run-a", "sess-3"))
	})
	t.Run(vocab.FindingTeeMismatch, func(t *testing.T) {
		runDir := t.TempDir()
		dir := recordedSession(t, t.TempDir(), "run-h", "sess-h", recorder.Options{})
		if err := os.MkdirAll(filepath.Join(runDir, vocab.KaliSideDir), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dir, filepath.Join(runDir, vocab.KaliSideDir, "sess-h")); err != nil {
			t.Fatal(err)
		}
		tees := filepath.Join(runDir, "mcp-side", "sessions")
		if err := os.MkdirAll(tees, 0o700); err != nil {
			t.Fatal(err)
		}
		tee := filepath.Join(tees, "sess-h.jsonl")
		if err := os.WriteFile(tee, []byte(`{"ts":1,"dir":"out","b64":"JCBybSAtcmYgLw0K"}`+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		doc, code := verifyClassJSON(t, pub, "--run-dir", runDir)
		wantRunClass(t, doc, code, vocab.FindingTeeMismatch, string(evidence.KindTeeMismatch), tee)
	})
}

// wantRunClass fails unless the run failed (exit 1) with a reconcile
// finding of class (and of kind and file, when given), counted.
func wantRunClass(t *testing.T, doc classDoc, code int, class, kind, file string) {
	t.Helper()
	if code != exitFailure || doc.OK {
		t.Fatalf("exit %d, ok %v; want %d, false", code, doc.OK, exitFailure)
	}
	found := false
	for _, s := range doc.Sessions {
		for _, a := range s.Reconcile {
			if a.Class == class && (kind == "" || a.Kind == kind) && (file == "" || a.File == file) {
				found = true
				if !hasCount(s.Summary, class) {
					t.Errorf("session %s: summary %+v does not count %s", s.Dir, s.Summary, class)
				}
			}
		}
	}
	if !found {
		t.Errorf("no %s finding (kind %q, file %q) among %+v", class, kind, file, doc.Sessions)
	}
	if !hasCount(doc.Summary, class) {
		t.Errorf("the document's summary %+v does not count %s", doc.Summary, class)
	}
	checkSummaries(t, doc)
}

// A path that is no session folder is not-a-session, with what to give
// instead, never tampered: a missing path, a run folder, a harvest root,
// a capture root, a file; and a --run-dir that is missing or a session.
// verify exits 1 for each.
func TestVerifyNotASession(t *testing.T) {
	root := t.TempDir()
	s1 := recordedSession(t, root, "run-1", "sess-1", recorder.Options{})
	recordedSession(t, root, "run-1", "sess-2", recorder.Options{})
	harvest := filepath.Join(t.TempDir(), "harvest")
	for _, d := range []string{vocab.KaliSideDir, "mcp-side"} {
		if err := os.MkdirAll(filepath.Join(harvest, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	missing := filepath.Join(root, "run-9", "no-such")
	pub := pubFile(t, recordertest.Signer().PublicKey())
	for _, tc := range []struct {
		name string
		args []string
		hint []string
	}{
		{"missing path", []string{missing}, []string{"no such folder: check the path"}},
		{"run folder", []string{filepath.Join(root, "run-1")}, []string{"a run folder", "use --run-dir " + filepath.Join(root, "run-1")}},
		{"harvest root", []string{harvest}, []string{"harvest", "use --run-dir " + harvest}},
		{"capture root", []string{root}, []string{"a capture root", s1, filepath.Join(root, "run-1", "sess-2"), "ls " + root}},
		{"a file", []string{file}, []string{"not a folder"}},
		{"an empty folder", []string{empty}, []string{"no pty/ folder"}},
		{"--run-dir missing", []string{"--run-dir", missing}, []string{"no such folder: check the path"}},
		{"--run-dir of a session", []string{"--run-dir", s1}, []string{"a session folder", "without --run-dir"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc, code := verifyClassJSON(t, pub, tc.args...)
			if code != exitFailure || doc.OK {
				t.Errorf("exit %d, ok %v; want %d, false", code, doc.OK, exitFailure)
			}
			var msgs []finding
			if doc.Run != nil {
				msgs = doc.Run.Anomalies
				if len(doc.Sessions) != 0 {
					t.Errorf("sessions %+v verified in no run folder", doc.Sessions)
				}
			} else {
				if len(doc.Sessions) != 1 || doc.Sessions[0].Status != string(evidence.StatusNotASession) {
					t.Fatalf("sessions %+v, want one %s", doc.Sessions, evidence.StatusNotASession)
				}
				msgs = doc.Sessions[0].Anomalies
			}
			if len(msgs) != 1 || msgs[0].Class != vocab.FindingNotASession || msgs[0].Kind != string(evidence.KindNotASession) {
				t.Fatalf("findings %+v, want one %s", msgs, vocab.FindingNotASession)
			}
			for _, h := range tc.hint {
				if !strings.Contains(msgs[0].Msg, h) {
					t.Errorf("message %q lacks %q", msgs[0].Msg, h)
				}
			}
			checkSummaries(t, doc)
			out, _, _ := runVerifyCaptured(t, append([]string{"--key", pub}, tc.args...)...)
			if strings.Contains(out, string(evidence.StatusTampered)) || !strings.Contains(out, tc.hint[0]) {
				t.Errorf("the text report says tampered, or not %q:\n%s", tc.hint[0], out)
			}
		})
	}
}

// The text report says what its counts are: records that chain and
// trusted checkpoints.
func TestVerifyTextNamesItsCounts(t *testing.T) {
	dir := recordedSession(t, t.TempDir(), "run-1", "sess-1", recorder.Options{})
	lines := readLog(t, dir)
	checkpoints := 0
	for _, l := range lines {
		if l.rec.Type == vocab.TypeCheckpoint {
			checkpoints++
		}
	}
	out, _, code := runVerifyCaptured(t, "--key", pubFile(t, recordertest.Signer().PublicKey()), dir)
	want := " records=" + strconv.Itoa(len(lines)) + " checkpoints=" + strconv.Itoa(checkpoints) + " "
	if code != exitOK || !strings.Contains(out, want) {
		t.Errorf("exit %d, report lacks %q:\n%s", code, want, out)
	}
}

// verify without --key says where the sidecar's host key is.
func TestVerifyWithoutKeySaysWhereItIs(t *testing.T) {
	_, errOut, code := runVerifyCaptured(t, t.TempDir())
	for _, want := range []string{defaultStateDir + "/ssh_host_ed25519_key.pub", "<state-dir>/ssh_host_ed25519_key.pub", "compose/local/known_hosts"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
}
