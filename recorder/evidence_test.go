package recorder

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

func trusted() []gossh.PublicKey { return []gossh.PublicKey{testOptions().Signer.PublicKey()} }

func TestRecordVerifies(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "s", Term: "xterm", Rows: 24, Cols: 80})
	mustOK(t, s.Input([]byte("ls\r")))
	mustOK(t, s.Output([]byte("ls\r\nfile\r\n")))
	mustOK(t, s.Resize(30, 100))
	mustOK(t, s.Event("request", map[string]string{"request": "signal", "name": "INT", "accepted": "true"}))
	mustOK(t, s.Stderr([]byte("err")))
	mustOK(t, s.Close(0, Header{Name: "APTL_CLOSE_REASON", Value: "shell-exited"}))
	rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{})
	if !rep.OK() {
		t.Fatalf("fresh record does not verify: %v", rep.Anomalies)
	}
	if rep.Bytes.In != 3 || rep.Bytes.Out != 10 || rep.Bytes.Err != 3 || rep.Bytes.Stored != 16 {
		t.Errorf("totals = %+v", rep.Bytes)
	}
	if len(rep.Gaps) != 0 {
		t.Errorf("a session that stored every byte lists gaps %+v", rep.Gaps)
	}
}

// TestCheckpointsByVolume writes more than checkpointBytes: besides the one
// at close, the log must hold signed heads on the way.
func TestCheckpointsByVolume(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "big"})
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for n := 0; n < checkpointBytes*5/2; n += len(chunk) {
		mustOK(t, s.Output(chunk))
	}
	mustOK(t, s.Close(0))
	rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{})
	if !rep.OK() || rep.Signed < 3 {
		t.Fatalf("signed checkpoints = %d, anomalies %v; want 2 on the way and 1 at close", rep.Signed, rep.Anomalies)
	}
}

func TestSizeCapKeepsTheChain(t *testing.T) {
	root := t.TempDir()
	opts := testOptions()
	opts.MaxBytes = 1000
	var reached []string // the call at which OnSizeLimit ran, and its cap
	call := 0
	opts.OnSizeLimit = func(limit int64) { reached = append(reached, fmt.Sprintf("call %d cap %d", call, limit)) }
	s := createSession(t, root, Meta{RunID: "r", SessionID: "capped"}, opts)
	for call = 0; call < 30; call++ {
		mustOK(t, s.Output([]byte(fmt.Sprintf("%099d\n", call))))
	}
	mustOK(t, s.Close(0))
	// 1000 bytes fill at the 10th write; the 11th is the first past the cap.
	if want := []string{"call 10 cap 1000"}; !slices.Equal(reached, want) {
		t.Errorf("OnSizeLimit calls %q, want %q: once, when the cap is reached", reached, want)
	}
	rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{})
	if !rep.OK() {
		t.Fatalf("capped record does not verify: %v", rep.Anomalies)
	}
	if rep.Bytes.Out != 3000 || rep.Bytes.Stored != 1000 {
		t.Errorf("counted %d, stored %d; want 3000 and 1000", rep.Bytes.Out, rep.Bytes.Stored)
	}
	log := readRecord(t, s.Dir(), vocab.LogFile)
	if !strings.Contains(log, `"type":"gap"`) || !strings.Contains(log, `"reason":"size-limit"`) {
		t.Error("the log does not say data went unstored")
	}
	timing := readRecord(t, s.Dir(), "timing")
	if !strings.Contains(timing, "APTL_SIZE_LIMIT") {
		t.Error("the timing file does not say the cap was reached")
	}
	// The writes past the cap stored nothing: they have no timing line
	// (a line of 0 bytes would be a write that never reached the file).
	if n := strings.Count(timing, "\nO "); n != 10 {
		t.Errorf("%d output timing lines, want the 10 writes that were stored", n)
	}
}

// TestStrictSyncWritesLogBeforeReturning: in strict mode, once a call
// that records returns, what it recorded is on disk under a signed head:
// the log's last line is a checkpoint over it, whatever wrote the record
// (bytes of each stream, a window change, a control event, an event, a
// header, the audit attribution).
func TestStrictSyncWritesLogBeforeReturning(t *testing.T) {
	opts := testOptions()
	opts.Sync = SyncStrict
	s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "strict"}, opts)
	defer s.Close(0)
	for i, chunk := range []string{"durable", " and signed", "\r\n$ "} {
		mustOK(t, s.Output([]byte(chunk)))
		if !strings.Contains(readRecord(t, s.Dir(), vocab.LogFile), `"type":"data"`) {
			t.Fatalf("chunk %d: strict mode returned before the data record was written", i)
		}
		checkSignedHead(t, s, fmt.Sprintf("output chunk %d", i))
	}
	for _, call := range []struct {
		name   string
		record func() error
	}{
		{"input", func() error { return s.Input([]byte("ls\r")) }},
		{"stderr", func() error { return s.Stderr([]byte("warning")) }},
		{"window change", func() error { return s.Resize(30, 100) }},
		{"control event", func() error {
			return s.Control("request", map[string]string{vocab.AttrRequest: "signal", "name": "INT", vocab.AttrAccepted: "true"})
		}},
		{"event", func() error { return s.Event("note", map[string]string{"k": "v"}) }},
		{"header", func() error { return s.Annotate(Header{Name: "APTL_X", Value: "y"}) }},
		{"audit session", func() error { return s.BindAuditSession(7) }},
	} {
		mustOK(t, call.record())
		checkSignedHead(t, s, call.name)
	}
	// The other attribution, in a session of its own: one session has
	// one audit-session record.
	other := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "strict-unattributed"}, opts)
	mustOK(t, other.NoAuditSession("no loginuid"))
	checkSignedHead(t, other, "no audit session")
}

// TestOpenRecordNamesTheSyncMode: the open record says which durability
// the session was recorded with, as the configuration spells it.
func TestOpenRecordNamesTheSyncMode(t *testing.T) {
	for mode, want := range map[SyncMode]string{SyncInterval: "interval", SyncStrict: "strict"} {
		opts := testOptions()
		opts.Sync = mode
		s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: want}, opts)
		mustOK(t, s.Close(0))
		if got := logRecords(t, s.Dir())[0].Attrs["sync"]; got != want {
			t.Errorf("a %s session's open record says sync %q", want, got)
		}
	}
}

// Equivalent mutant (gremlins): evidence.go checkpointAndSync's
// `s.sinceCheckpoint > 0` turned to `>= 0` changes nothing: in strict
// mode it runs only after a call that recorded something, so the
// condition's other terms (a record appended since the last signature)
// or the bytes themselves already make it true.

// checkSignedHead fails unless s's log ends in a checkpoint over the
// record before it (the head), stating the typescript's size on disk, its
// signature the host key's over that head.
func checkSignedHead(t *testing.T, s *Session, after string) {
	t.Helper()
	log := readRecord(t, s.Dir(), vocab.LogFile)
	lines := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	var cp integrity.Record
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &cp); err != nil || cp.Type != vocab.TypeCheckpoint {
		t.Fatalf("after the %s: the log's last line is not a checkpoint: %q", after, lines[len(lines)-1])
	}
	ts, err := os.Stat(filepath.Join(s.Dir(), vocab.PTYDir, vocab.TypescriptFile))
	if err != nil {
		t.Fatal(err)
	}
	if cp.Attrs[vocab.AttrTSSize] != strconv.FormatInt(ts.Size(), 10) {
		t.Errorf("after the %s: the checkpoint vouches for %s typescript bytes, the file holds %d", after, cp.Attrs[vocab.AttrTSSize], ts.Size())
	}
	sum := sha256.Sum256([]byte(lines[len(lines)-2]))
	head := hex.EncodeToString(sum[:])
	// The folders are named by the ids: <root>/<run_id>/<session_id>.
	run, session := filepath.Base(filepath.Dir(s.Dir())), filepath.Base(s.Dir())
	if _, err := integrity.VerifySSHSIG(cp.Sig, integrity.HeadNamespace, integrity.HeadMessage(run, session, cp.Seq-1, head)); err != nil || cp.Prev != head {
		t.Errorf("after the %s: the checkpoint does not sign the head it follows: %v", after, err)
	}
}

// BenchmarkInteractive measures what recording costs one command of an
// interactive shell: the line the client types, then four bursts of
// output (the terminal's echo, the command's lines, the prompt), each as
// the broker records it. "plain" makes the same write(2) calls without
// digests or log records (typescript and timing for each chunk, and the
// log's record when the stream changes): the floor of writing it all
// before it is forwarded. docs/BENCHMARKS.md uses the difference.
func BenchmarkInteractive(b *testing.B) {
	line := []byte("echo \"B_START_1\"; true; echo \"B_END_1:$?\"\r")
	burst := []byte("B_START_1\r\n")
	b.Run("plain", func(b *testing.B) {
		dir := b.TempDir()
		var files [3]*os.File
		for i, name := range []string{"ts", "tm", "log"} {
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			files[i] = f
		}
		ts, tm, log := files[0], files[1], files[2]
		entry := []byte("O 0.000012 11\n")
		record := bytes.Repeat([]byte("r"), 230) // a data record's size in the log
		for b.Loop() {
			ts.Write(line)
			tm.Write(entry)
			log.Write(record)
			for range 4 {
				ts.Write(burst)
				tm.Write(entry)
			}
			log.Write(record)
		}
	})
	b.Run("recorder", func(b *testing.B) {
		s, err := Create(b.TempDir(), Meta{RunID: "r", SessionID: "s"}, testOptions())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Input(line); err != nil {
				b.Fatal(err)
			}
			for range 4 {
				if err := s.Output(burst); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		s.Close(0)
	})
}

// BenchmarkOutput measures recording chunks of 4 KiB (a PTY master's
// read), 64 KiB (a pipe's default capacity) and 1 MiB (the broker's largest
// batch, broker/readbatch_linux.go):
// "plain" writes the same typescript bytes and timing lines to two files,
// as the recorder would without the integrity log; "interval" and "strict"
// are the recorder with the log under each durability mode.
// log-bytes/MiB is the log's size per MiB of transcript.
func BenchmarkOutput(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		p := bytes.Repeat([]byte("0123456789abcdef"), size/16)
		kib := fmt.Sprintf("/%dKiB", size>>10)
		b.Run("plain"+kib, func(b *testing.B) {
			ts, _ := os.Create(filepath.Join(b.TempDir(), "ts"))
			tm, _ := os.Create(filepath.Join(b.TempDir(), "tm"))
			defer ts.Close()
			defer tm.Close()
			line := fmt.Appendf(nil, "O 0.000012 %d\n", size)
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				ts.Write(p)
				tm.Write(line)
			}
		})
		for _, mode := range []SyncMode{SyncInterval, SyncStrict} {
			b.Run(mode.String()+kib, func(b *testing.B) {
				opts := testOptions()
				opts.Sync = mode
				s, err := Create(b.TempDir(), Meta{RunID: "r", SessionID: "s"}, opts)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(p)))
				b.ReportAllocs()
				for b.Loop() {
					if err := s.Output(p); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				s.Close(0)
				st, _ := os.Stat(filepath.Join(s.Dir(), "pty", vocab.LogFile))
				_, out := s.Bytes()
				b.ReportMetric(float64(st.Size())/(float64(out)/(1<<20)), "log-bytes/MiB")
			})
		}
	}
}
