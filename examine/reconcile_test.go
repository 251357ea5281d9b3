//go:build linux

// The sessions these tests verify are made by the recorder, which runs on
// Linux only; the examiner itself builds everywhere (.ci/run cross-builds it).

package examine_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// The package's external tests: they record real sessions with package
// recorder, which imports integrity.

// teeEntry is one line the tool server logs.
type teeEntry struct {
	dir string // "out" or "err"
	p   []byte
}

// writeTee writes the tool server's tee of session id, splitting each
// entry into lines of at most 7 bytes so that its chunking differs from
// the sidecar's.
func writeTee(t *testing.T, runDir, id string, entries ...teeEntry) string {
	t.Helper()
	return writeTeeLines(t, runDir, id, 7, entries...)
}

// writeTeeLines is writeTee with lines of at most size bytes.
func writeTeeLines(t *testing.T, runDir, id string, size int, entries ...teeEntry) string {
	t.Helper()
	var b strings.Builder
	ts := 1767225600000
	for _, e := range entries {
		for p := e.p; len(p) > 0; {
			n := min(len(p), size)
			line, err := json.Marshal(map[string]any{"ts": ts, "dir": e.dir, "b64": base64.StdEncoding.EncodeToString(p[:n])})
			if err != nil {
				t.Fatal(err)
			}
			b.Write(append(line, '\n'))
			p, ts = p[n:], ts+1
		}
	}
	return writeTeeText(t, runDir, id, b.String())
}

func writeTeeText(t *testing.T, runDir, id, text string) string {
	t.Helper()
	dir := filepath.Join(runDir, "mcp-side", "sessions")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, id+".jsonl")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func insertAt(p []byte, i int, b byte) []byte {
	return append(append(append([]byte{}, p[:i]...), b), p[i:]...)
}

func removeAt(p []byte, i int) []byte { return append(append([]byte{}, p[:i]...), p[i+1:]...) }

func changeAt(p []byte, i int, b byte) []byte {
	q := append([]byte{}, p...)
	q[i] = b
	return q
}

func TestReconcileRun(t *testing.T) {
	spec := recordertest.PTYSpec("sess-1")
	tests := []struct {
		name string
		tee  func(out []byte) []teeEntry
		want string // substring of the one reconciliation anomaly; "" for none
		off  int64
	}{
		{"match", func(out []byte) []teeEntry { return []teeEntry{{"out", out}} }, "", 0},
		{"inserted", func(out []byte) []teeEntry { return []teeEntry{{"out", insertAt(out, 9, 'X')}} },
			"out stream: byte inserted in the tee at offset 9", 9},
		{"inserted at end", func(out []byte) []teeEntry { return []teeEntry{{"out", insertAt(out, len(out), '\a')}} },
			"byte inserted in the tee at offset 56", 56},
		{"removed", func(out []byte) []teeEntry { return []teeEntry{{"out", removeAt(out, 20)}} },
			"out stream: byte removed from the tee at offset 20", 20},
		{"changed", func(out []byte) []teeEntry { return []teeEntry{{"out", changeAt(out, 0, '#')}} },
			"out stream: byte changed at offset 0 (sidecar 0x24, tee 0x23)", 0},
		{"truncated", func(out []byte) []teeEntry { return []teeEntry{{"out", out[:50]}} },
			"out stream: streams differ from offset 50 (sidecar 56 bytes, tee 50 bytes)", 50},
		{"two changes", func(out []byte) []teeEntry { return []teeEntry{{"out", changeAt(changeAt(out, 3, 'x'), 40, 'y')}} },
			"out stream: streams differ from offset 3 (sidecar 56 bytes, tee 56 bytes); the tee's byte 3 is on its line 1", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runDir := recordertest.NewRunDir(t)
			out, _ := recordertest.Record(t, runDir, spec)
			if len(out) != 56 {
				t.Fatalf("recorded %d output bytes; the cases assume 56", len(out))
			}
			tee := writeTee(t, runDir, spec.ID, tt.tee(out)...)
			if sr := reconcileAndCheck(t, runDir, spec.ID, tee, tt.want, tt.off); sr.Tee != tee {
				t.Errorf("Tee = %q, want %q", sr.Tee, tee)
			}
		})
	}
}

// reconcileAndCheck reconciles the run in runDir, requires its one session
// (id) to verify, and checks the reconciliation finds want at off in tee
// (want "": nothing).
func reconcileAndCheck(t *testing.T, runDir, id, tee, want string, off int64) *examine.SessionReconciliation {
	t.Helper()
	rr := examine.VerifyRun(runDir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	sr := oneSession(t, rr, id)
	if !sr.Report.OK() {
		t.Fatalf("session does not verify: %v", sr.Report.Anomalies)
	}
	checkOne(t, rr, sr, tee, want, off)
	return sr
}

// oneSession returns the run's only session, which must be id.
func oneSession(t *testing.T, rr *examine.RunReport, id string) *examine.SessionReconciliation {
	t.Helper()
	if len(rr.Sessions) != 1 || rr.Sessions[0].SessionID != id {
		t.Fatalf("sessions = %+v, want just %s", rr.Sessions, id)
	}
	return rr.Sessions[0]
}

// checkOne checks that sr has exactly the anomaly want (none when want is
// "") in file at offset off, and the run's verdict.
func checkOne(t *testing.T, rr *examine.RunReport, sr *examine.SessionReconciliation, file, want string, off int64) {
	t.Helper()
	if len(rr.Anomalies) != 0 {
		t.Errorf("run anomalies: %v", rr.Anomalies)
	}
	if want == "" {
		if len(sr.Anomalies) != 0 || !rr.OK() {
			t.Errorf("OK = %v, anomalies %v; want OK", rr.OK(), sr.Anomalies)
		}
		return
	}
	if rr.OK() {
		t.Error("run reported OK despite a divergence")
	}
	if len(sr.Anomalies) != 1 {
		t.Fatalf("anomalies = %v, want one: %q", sr.Anomalies, want)
	}
	a := sr.Anomalies[0]
	t.Logf("anomaly: %v", a)
	if !strings.Contains(a.Msg, want) || a.File != file || a.Offset != off {
		t.Errorf("anomaly = %+v\nwant file %s, offset %d, message containing %q", a, file, off, want)
	}
}

// TestReconcileStderrAndDelivered covers a session without a PTY: stdout
// and stderr are compared apart, each truncated to what the client's
// channel accepted.
func TestReconcileStderrAndDelivered(t *testing.T) {
	spec := recordertest.Spec{ID: "exec-1", DeliveredOut: 10, DeliveredErr: 9, Steps: []recordertest.Chunk{
		recordertest.Out("line one\n"),
		recordertest.Err("warning: x\n"),
		recordertest.Out("line two\n"),
	}}
	tests := []struct {
		name    string
		out, er func(out, errOut []byte) []byte
		want    string
		off     int64
	}{
		{"match delivered", func(o, _ []byte) []byte { return o[:10] }, func(_, e []byte) []byte { return e[:9] }, "", 0},
		{"tee has undelivered bytes", func(o, _ []byte) []byte { return o }, func(_, e []byte) []byte { return e[:9] },
			"out stream: streams differ from offset 10 (sidecar 10 bytes, tee 18 bytes)", 10},
		{"stderr changed", func(o, _ []byte) []byte { return o[:10] }, func(_, e []byte) []byte { return changeAt(e[:9], 8, '!') },
			"err stream: byte changed at offset 8 (sidecar 0x20, tee 0x21)", 8},
		{"stderr removed", func(o, _ []byte) []byte { return o[:10] }, func(_, e []byte) []byte { return removeAt(e[:9], 0) },
			"err stream: byte removed from the tee at offset 0", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runDir := recordertest.NewRunDir(t)
			out, errOut := recordertest.Record(t, runDir, spec)
			tee := writeTee(t, runDir, spec.ID, teeEntry{"err", tt.er(out, errOut)}, teeEntry{"out", tt.out(out, errOut)})
			reconcileAndCheck(t, runDir, spec.ID, tee, tt.want, tt.off)
		})
	}
}

// TestReconcileNothingDeliveredOnStderr: an exec session whose client
// accepted none of its stderr (the close record says 0 delivered) is
// compared on stdout alone: a tee without stderr reconciles, one with the
// stderr bytes the channel never delivered does not.
func TestReconcileNothingDeliveredOnStderr(t *testing.T) {
	spec := recordertest.Spec{ID: "exec-0", DeliveredOut: 9, DeliveredErr: 0, Steps: []recordertest.Chunk{
		recordertest.Out("line one\n"),
		recordertest.Err("never delivered\n"),
	}}
	runDir := recordertest.NewRunDir(t)
	out, errOut := recordertest.Record(t, runDir, spec)
	tee := writeTee(t, runDir, spec.ID, teeEntry{"out", out})
	reconcileAndCheck(t, runDir, spec.ID, tee, "", 0)
	runDir = recordertest.NewRunDir(t)
	recordertest.Record(t, runDir, spec)
	tee = writeTee(t, runDir, spec.ID, teeEntry{"out", out}, teeEntry{"err", errOut})
	reconcileAndCheck(t, runDir, spec.ID, tee, "err stream: streams differ from offset 0 (sidecar 0 bytes, tee 16 bytes)", 0)
}

// TestReconcileUnstored: past the size cap the sidecar keeps only a digest;
// the tee's bytes are checked against it.
func TestReconcileUnstored(t *testing.T) {
	spec := recordertest.Spec{ID: "capped", MaxBytes: 8, DeliveredOut: 24, DeliveredErr: -1, Steps: []recordertest.Chunk{
		recordertest.Out("0123456789abcdef"),
		recordertest.Out("ghijklmn"),
	}}
	tests := []struct {
		name string
		tee  func(out []byte) []byte
		want string
		off  int64
	}{
		{"match", func(out []byte) []byte { return out }, "", 0},
		{"changed past the cap", func(out []byte) []byte { return changeAt(out, 12, 'Z') },
			"out stream: tee bytes 8..24 differ from the digest of the bytes the sidecar counted but did not store", 8},
		{"changed before the cap", func(out []byte) []byte { return changeAt(out, 2, 'Z') },
			"out stream: streams differ from offset 2 (sidecar 24 bytes, tee 24 bytes)", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runDir := recordertest.NewRunDir(t)
			out, _ := recordertest.Record(t, runDir, spec)
			teeOut := tt.tee(out)
			tee := writeTee(t, runDir, spec.ID, teeEntry{"out", teeOut})
			sr := reconcileAndCheck(t, runDir, spec.ID, tee, tt.want, tt.off)
			// Past the cap the digests are what was compared: the
			// sidecar's of what it counted, and the tee's bytes'.
			if tt.off == 8 && len(sr.Anomalies) == 1 {
				want, got := sha256.Sum256(out[8:24]), sha256.Sum256(teeOut[8:24])
				if a := sr.Anomalies[0]; a.Expected != hex.EncodeToString(want[:]) || a.Actual != hex.EncodeToString(got[:]) {
					t.Errorf("expected %q actual %q, want the digests %x and %x", a.Expected, a.Actual, want, got)
				}
			}
		})
	}
}

func TestReconcileMalformedTee(t *testing.T) {
	spec := recordertest.PTYSpec("sess-1")
	runDir := recordertest.NewRunDir(t)
	out, _ := recordertest.Record(t, runDir, spec)
	good := func(p []byte) string {
		return `{"ts": 1767225600000, "dir": "out", "b64": "` + base64.StdEncoding.EncodeToString(p) + `"}` + "\n"
	}
	lines := []string{
		good(out[:30]),
		"not json\n",
		`{"ts": 1, "dir": "in", "b64": ""}` + "\n",
		`{"ts": 1, "dir": "out", "b64": "***"}` + "\n",
		`{"dir": "out", "b64": ""}` + "\n",
		good(out[30:]),
	}
	tee := writeTeeText(t, runDir, spec.ID, strings.Join(lines, ""))
	rr := examine.VerifyRun(runDir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	sr := oneSession(t, rr, spec.ID)
	if rr.OK() {
		t.Error("run with a malformed tee reported OK")
	}
	var off int64
	for i, line := range lines {
		if i >= 1 && i <= 4 {
			want := "line " + strconv.Itoa(i+1) + ": malformed tee line"
			if j := i - 1; j >= len(sr.Anomalies) || !strings.Contains(sr.Anomalies[j].Msg, want) ||
				sr.Anomalies[j].Offset != off || sr.Anomalies[j].File != tee {
				t.Errorf("anomalies = %v, want %q at offset %d", sr.Anomalies, want, off)
			}
		}
		off += int64(len(line))
	}
	if len(sr.Anomalies) != 4 {
		t.Errorf("anomalies = %v, want the 4 malformed lines and no divergence (they are skipped)", sr.Anomalies)
	}
}

func TestReconcileRunLayout(t *testing.T) {
	runDir := recordertest.NewRunDir(t)
	out, _ := recordertest.Record(t, runDir, recordertest.PTYSpec("teed"))
	recordertest.Record(t, runDir, recordertest.PTYSpec("not-teed"))
	writeTee(t, runDir, "teed", teeEntry{"out", out})
	orphan := writeTee(t, runDir, "orphan", teeEntry{"out", []byte("hello")})
	if err := os.WriteFile(filepath.Join(runDir, "mcp-side", "sessions", "README"), nil, 0o600); err != nil {
		t.Fatal(err) // not a tee: no .jsonl suffix
	}

	rr := examine.VerifyRun(runDir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	if rr.OK() {
		t.Error("run with an orphan tee reported OK")
	}
	if len(rr.Anomalies) != 1 || rr.Anomalies[0].File != orphan || !strings.Contains(rr.Anomalies[0].Msg, `tee of session "orphan", which has no Kali-side session`) {
		t.Errorf("run anomalies = %v, want the orphan tee", rr.Anomalies)
	}
	if len(rr.Sessions) != 2 {
		t.Fatalf("sessions = %d, want 2", len(rr.Sessions))
	}
	for _, sr := range rr.Sessions {
		if !sr.Report.OK() || len(sr.Anomalies) != 0 {
			t.Errorf("session %s: report %v, anomalies %v", sr.SessionID, sr.Report.Anomalies, sr.Anomalies)
		}
	}
	if rr.Sessions[0].SessionID != "not-teed" || rr.Sessions[0].Tee != "" || rr.Sessions[1].Tee == "" {
		t.Errorf("sessions %s (tee %q), %s (tee %q)", rr.Sessions[0].SessionID, rr.Sessions[0].Tee, rr.Sessions[1].SessionID, rr.Sessions[1].Tee)
	}

	os.Remove(orphan)
	if rr := examine.VerifyRun(runDir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{}); !rr.OK() {
		t.Errorf("without the orphan: not OK: %v", rr.Anomalies)
	}
	if rr := examine.VerifyRun(t.TempDir(), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{}); rr.OK() || len(rr.Anomalies) != 1 {
		t.Errorf("empty run dir: OK %v, anomalies %v; want the missing kali-side reported", rr.OK(), rr.Anomalies)
	}
}

// TestReconcileTamperedSession: bytes of a session whose log does not
// verify are not used as evidence of delivery.
func TestReconcileTamperedSession(t *testing.T) {
	runDir := recordertest.NewRunDir(t)
	out, _ := recordertest.Record(t, runDir, recordertest.PTYSpec("sess-1"))
	writeTee(t, runDir, "sess-1", teeEntry{"out", out})
	ts := filepath.Join(runDir, "kali-side", "sess-1", "pty", "typescript")
	b, err := os.ReadFile(ts)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "total 0")
	b[i] = 'T'
	if err := os.WriteFile(ts, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rr := examine.VerifyRun(runDir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	sr := oneSession(t, rr, "sess-1")
	if rr.OK() || sr.Report.OK() {
		t.Fatal("tampered session reported OK")
	}
	// The typescript differs from its records: its bytes are no evidence
	// of delivery, so nothing is reconciled.
	if len(sr.Anomalies) != 1 || !strings.Contains(sr.Anomalies[0].Msg, "not reconciled") {
		t.Errorf("anomalies = %v, want the session left unreconciled", sr.Anomalies)
	}
}

// TestReconcileLarge crosses the comparison's chunk boundaries: output of
// several hundred KiB in pseudo-random bytes (all 256 values), recorded in
// chunks larger than a data record coalesces.
func TestReconcileLarge(t *testing.T) {
	var p [3][]byte
	x := uint32(2463534242)
	for i := range p {
		p[i] = make([]byte, 100_000+i)
		for j := range p[i] {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			p[i][j] = byte(x)
		}
	}
	spec := recordertest.Spec{ID: "big", DeliveredOut: -1, DeliveredErr: -1, Steps: []recordertest.Chunk{
		recordertest.Out(string(p[0])), recordertest.In("q"), recordertest.Out(string(p[1])), recordertest.Out(string(p[2])),
	}}
	tests := []struct {
		name string
		tee  func(out []byte) []byte
		want string
		off  int64
	}{
		{"match", func(out []byte) []byte { return out }, "", 0},
		{"inserted at a chunk boundary", func(out []byte) []byte { return insertAt(out, 65536, out[65536]^0xff) },
			"byte inserted in the tee at offset 65536", 65536},
		{"changed in the second record", func(out []byte) []byte { return changeAt(out, 150_001, out[150_001]^1) },
			"byte changed at offset 150001", 150_001},
		{"last byte removed", func(out []byte) []byte { return out[:len(out)-1] },
			"byte removed from the tee at offset 300002", 300_002},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runDir := recordertest.NewRunDir(t)
			out, _ := recordertest.Record(t, runDir, spec)
			tee := writeTeeLines(t, runDir, spec.ID, 4093, teeEntry{"out", tt.tee(out)})
			reconcileAndCheck(t, runDir, spec.ID, tee, tt.want, tt.off)
		})
	}
}

// TestReconcileSessionFromAnotherRun: a session recorded under another run
// id, harvested among this run's sessions, is reported; a run folder
// renamed as a whole verifies as the run its records name, with a note.
func TestReconcileSessionFromAnotherRun(t *testing.T) {
	runDir := recordertest.NewRunDir(t)
	recordertest.Record(t, runDir, recordertest.PTYSpec("sess-1"))
	recordertest.Record(t, runDir, recordertest.PTYSpec("sess-2"))
	renamed := filepath.Join(filepath.Dir(runDir), "copy-of-run")
	if err := os.Rename(runDir, renamed); err != nil {
		t.Fatal(err)
	}
	rr := examine.VerifyRun(renamed, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	if !rr.OK() || rr.RunID != "run-1" || len(rr.Notes) != 1 || rr.Notes[0].Kind != evidence.NoteRunFolderName {
		t.Errorf("renamed run folder: OK %v, run %q, notes %v, anomalies %v; want OK with a run-folder-name note", rr.OK(), rr.RunID, rr.Notes, rr.Anomalies)
	}

	s, err := recorder.Create(t.TempDir(), recorder.Meta{RunID: "run-2", SessionID: "sess-3"}, recorder.Options{Signer: recordertest.Signer()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.Dir(), filepath.Join(renamed, "kali-side", "sess-3")); err != nil {
		t.Fatal(err)
	}
	rr = examine.VerifyRun(renamed, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	if len(rr.Sessions) != 3 {
		t.Fatalf("sessions: %d, want 3", len(rr.Sessions))
	}
	moved := rr.Sessions[2]
	if rr.OK() || len(moved.Anomalies) != 1 || moved.Anomalies[0].Kind != evidence.KindRunMismatch || !strings.Contains(moved.Anomalies[0].Msg, `recorded for run "run-2"`) {
		t.Errorf("a session of run-2 passed as part of run-1: %v", moved.Anomalies)
	}
}

// TestVerifyRunServeLayout: a run folder as serve writes it
// (<root>/<run_id>/<session_id>) verifies every session in it, with no
// tee; the capture root given instead names each run folder as not a
// session.
func TestVerifyRunServeLayout(t *testing.T) {
	root := t.TempDir()
	for _, id := range []string{"sess-1", "sess-2"} {
		s, err := recorder.Create(root, recorder.Meta{RunID: "run-1", SessionID: id}, recorder.Options{Signer: recordertest.Signer()})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Output([]byte("hello\r\n")); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(0); err != nil {
			t.Fatal(err)
		}
	}
	rr := examine.VerifyRun(filepath.Join(root, "run-1"), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	if !rr.OK() || rr.Layout != examine.LayoutServe || rr.RunID != "run-1" || len(rr.Sessions) != 2 || len(rr.Notes) != 0 {
		t.Errorf("serve layout: OK %v, layout %q, run %q, %d sessions, anomalies %v, notes %v", rr.OK(), rr.Layout, rr.RunID, len(rr.Sessions), rr.Anomalies, rr.Notes)
	}
	rr = examine.VerifyRun(root, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	if rr.OK() || len(rr.Anomalies) != 2 || rr.Anomalies[0].Kind != evidence.KindNotASession || rr.Anomalies[1].Kind != evidence.KindNoSessions || !strings.Contains(rr.Anomalies[0].Msg, "run folder") {
		t.Errorf("the capture root: OK %v, anomalies %v", rr.OK(), rr.Anomalies)
	}
}
