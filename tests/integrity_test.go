package tests

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
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// recordSession records a real PTY session with output, input, a window
// change and a non-echoed secret, and returns its directory.
func recordSession(t *testing.T, h *harness, id string) string {
	t.Helper()
	ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": id, "APTL_RUN_ID": "tamper"}, 24, 80)
	ss.send("echo \"$APTL_SESSION_ID\"; seq 1 3000; echo \"DONE_$((1+1))\"\n")
	ss.waitOutput(regexp.MustCompile(`DONE_2\r\n`))
	if err := ss.s.WindowChange(30, 100); err != nil {
		t.Fatal(err)
	}
	ss.send("stty -echo; echo READY_S; read -s X; stty echo; echo \"GOT_${#X}\"\n")
	ss.waitOutput(regexp.MustCompile(`READY_S\r\n`))
	ss.send("secret\n")
	ss.waitOutput(regexp.MustCompile(`GOT_6\r\n`))
	ss.send("exit 0\n")
	if err := ss.finish(); err != nil {
		t.Fatal(err)
	}
	h.waitIdle(t)
	return h.sessionDir("tamper", id)
}

func verifyOK(t *testing.T, dir string, key gossh.PublicKey) *evidence.Report {
	t.Helper()
	rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{key}}, evidence.Options{})
	if !rep.OK() {
		t.Fatalf("untouched session does not verify: %v", rep.Anomalies)
	}
	return rep
}

// copySession copies a session directory to a new place with the same
// run and session ids, so each tamper case starts from the real record.
func copySession(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(filepath.Dir(src)), filepath.Base(src))
	for _, name := range []string{"typescript", "timing", vocab.LogFile} {
		data, err := os.ReadFile(filepath.Join(src, "pty", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, "pty"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, "pty", name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// edit rewrites one record file with f.
func edit(t *testing.T, dir, name string, f func([]byte) []byte) {
	t.Helper()
	path := filepath.Join(dir, "pty", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func flipAt(off func([]byte) int) func([]byte) []byte {
	return func(b []byte) []byte {
		b = bytes.Clone(b)
		b[off(b)] ^= 0x01
		return b
	}
}

func cutAt(off func([]byte) int) func([]byte) []byte {
	return func(b []byte) []byte { return b[:off(b)] }
}

func frac(num, den int) func([]byte) int { return func(b []byte) int { return len(b) * num / den } }

// lines helpers for the log.
func logLines(b []byte) [][]byte {
	return bytes.SplitAfter(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

func joinLines(ls [][]byte) []byte {
	out := bytes.Join(ls, nil)
	if !bytes.HasSuffix(out, []byte("\n")) {
		out = append(out, '\n')
	}
	return out
}

func TestTamperMatrix(t *testing.T) {
	h := newHarness(t)
	dirA := recordSession(t, h, "tamper-a")
	dirB := recordSession(t, h, "tamper-b")
	repA := verifyOK(t, dirA, h.hostKey)
	verifyOK(t, dirB, h.hostKey)
	if repA.Records < 8 || repA.Signed < 1 {
		t.Fatalf("session too small for the matrix: %d records, %d signed", repA.Records, repA.Signed)
	}
	tsA, _ := os.ReadFile(filepath.Join(dirA, "pty", "typescript"))
	headerLen := bytes.IndexByte(tsA, '\n') + 1

	cases := []struct {
		name     string
		file     string // the file the tamper is in
		mutate   func(t *testing.T, dir string)
		wantFile string // the file the first anomaly must name
	}{
		{"typescript body byte flipped", "typescript", func(t *testing.T, d string) {
			edit(t, d, "typescript", flipAt(func([]byte) int { return headerLen + 100 }))
		}, "typescript"},
		{"typescript header byte flipped", "typescript", func(t *testing.T, d string) {
			edit(t, d, "typescript", flipAt(func([]byte) int { return 20 }))
		}, "typescript"},
		{"typescript trailer byte flipped", "typescript", func(t *testing.T, d string) {
			edit(t, d, "typescript", flipAt(func(b []byte) int { return len(b) - 5 }))
		}, "typescript"},
		{"timing byte flipped", "timing", func(t *testing.T, d string) {
			edit(t, d, "timing", flipAt(frac(1, 2)))
		}, "timing"},
		{"log byte flipped", vocab.LogFile, func(t *testing.T, d string) {
			edit(t, d, vocab.LogFile, func(b []byte) []byte {
				ls := logLines(b)
				i := bytes.Index(ls[2], []byte(`"t":"`)) + 8 // a digit of the year
				ls[2] = bytes.Clone(ls[2])
				ls[2][i] ^= 0x01
				return joinLines(ls)
			})
		}, vocab.LogFile},
		{"typescript emptied", "typescript", func(t *testing.T, d string) { edit(t, d, "typescript", cutAt(frac(0, 1))) }, "typescript"},
		{"typescript cut in header", "typescript", func(t *testing.T, d string) {
			edit(t, d, "typescript", cutAt(func([]byte) int { return headerLen / 2 }))
		}, "typescript"},
		{"typescript cut in body", "typescript", func(t *testing.T, d string) { edit(t, d, "typescript", cutAt(frac(1, 2))) }, "typescript"},
		{"typescript trailer cut", "typescript", func(t *testing.T, d string) {
			edit(t, d, "typescript", cutAt(func(b []byte) int { return len(b) - 3 }))
		}, "typescript"},
		{"timing cut early", "timing", func(t *testing.T, d string) { edit(t, d, "timing", cutAt(frac(1, 10))) }, "timing"},
		{"timing cut late", "timing", func(t *testing.T, d string) { edit(t, d, "timing", cutAt(frac(9, 10))) }, "timing"},
		{"log cut mid-record", vocab.LogFile, func(t *testing.T, d string) {
			edit(t, d, vocab.LogFile, cutAt(frac(1, 2)))
		}, vocab.LogFile},
		{"log cut at a record boundary", vocab.LogFile, func(t *testing.T, d string) {
			edit(t, d, vocab.LogFile, func(b []byte) []byte { return joinLines(logLines(b)[:4]) })
		}, vocab.LogFile},
		{"record removed", vocab.LogFile, func(t *testing.T, d string) {
			edit(t, d, vocab.LogFile, func(b []byte) []byte {
				ls := logLines(b)
				return joinLines(append(ls[:3:3], ls[4:]...))
			})
		}, vocab.LogFile},
		{"record duplicated", vocab.LogFile, func(t *testing.T, d string) {
			edit(t, d, vocab.LogFile, func(b []byte) []byte {
				ls := logLines(b)
				return joinLines(append(ls[:4:4], ls[3:]...))
			})
		}, vocab.LogFile},
		{"records reordered", vocab.LogFile, func(t *testing.T, d string) {
			edit(t, d, vocab.LogFile, func(b []byte) []byte {
				ls := logLines(b)
				ls[3], ls[4] = ls[4], ls[3]
				return joinLines(ls)
			})
		}, vocab.LogFile},
		{"garbage appended to log", vocab.LogFile, func(t *testing.T, d string) {
			edit(t, d, vocab.LogFile, func(b []byte) []byte { return append(bytes.Clone(b), "{\"seq\":999}\n"...) })
		}, vocab.LogFile},
		{"garbage appended to typescript", "typescript", func(t *testing.T, d string) {
			edit(t, d, "typescript", func(b []byte) []byte { return append(bytes.Clone(b), "rm -rf /\n"...) })
		}, "typescript"},
		{"garbage appended to timing", "timing", func(t *testing.T, d string) {
			edit(t, d, "timing", func(b []byte) []byte { return append(bytes.Clone(b), "O 0.1 9\n"...) })
		}, "timing"},
		{"typescript of another session", "typescript", func(t *testing.T, d string) {
			other, _ := os.ReadFile(filepath.Join(dirB, "pty", "typescript"))
			edit(t, d, "typescript", func([]byte) []byte { return other })
		}, "typescript"},
		{"close record missing", vocab.LogFile, func(t *testing.T, d string) {
			edit(t, d, vocab.LogFile, func(b []byte) []byte {
				ls := logLines(b)
				return joinLines(ls[:len(ls)-2])
			})
		}, vocab.LogFile},
		{"bytes added to the last record", vocab.LogFile, func(t *testing.T, d string) {
			edit(t, d, vocab.LogFile, func(b []byte) []byte {
				return append(bytes.TrimSuffix(bytes.Clone(b), []byte("\n")), " {\"note\":\"x\"}\n"...)
			})
		}, vocab.LogFile},
		{"absurd header length in the open record", vocab.LogFile, func(t *testing.T, d string) {
			edit(t, d, vocab.LogFile, func(b []byte) []byte {
				return regexp.MustCompile(`"ts_header_len":"\d+"`).ReplaceAll(b, []byte(`"ts_header_len":"99999999999999"`))
			})
		}, vocab.LogFile},
		{"re-chained without the host key", vocab.LogFile, func(t *testing.T, d string) {
			rechainAfterEdit(t, d)
		}, vocab.LogFile},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := copySession(t, dirA)
			tc.mutate(t, d)
			rep := evidence.Verify(d, evidence.Keys{Trusted: []gossh.PublicKey{h.hostKey}}, evidence.Options{})
			if rep.OK() || len(rep.Anomalies) == 0 {
				t.Fatalf("tampering with %s went undetected", tc.file)
			}
			if a := rep.Anomalies[0]; a.File != tc.wantFile {
				t.Errorf("first anomaly names %q, want %q: %v", a.File, tc.wantFile, rep.Anomalies)
			}
			for _, a := range rep.Anomalies {
				if a.Seq < 0 && a.Offset < 0 && !strings.Contains(a.Msg, "unfinalized") {
					t.Errorf("anomaly without a location: %v", a)
				}
			}
		})
	}

	t.Run("files moved to another session's directory", func(t *testing.T) {
		d := copySession(t, dirA)
		moved := filepath.Join(filepath.Dir(d), "tamper-b")
		if err := os.Rename(d, moved); err != nil {
			t.Fatal(err)
		}
		// The signed ids say which session it is; the folder's name is a
		// note, so a renamed copy still verifies, and says so.
		rep := evidence.Verify(moved, evidence.Keys{Trusted: []gossh.PublicKey{h.hostKey}}, evidence.Options{})
		if !rep.OK() || rep.SessionID == "tamper-b" || !hasNote(rep, evidence.NoteFolderName) {
			t.Errorf("session A's files in B's folder: OK %v, session %q, notes %v", rep.OK(), rep.SessionID, rep.Notes)
		}
	})
	t.Run("files moved to another run", func(t *testing.T) {
		d := copySession(t, dirA)
		moved := filepath.Join(filepath.Dir(filepath.Dir(d)), "other-run", filepath.Base(d))
		if err := os.MkdirAll(filepath.Dir(moved), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(d, moved); err != nil {
			t.Fatal(err)
		}
		rep := evidence.Verify(moved, evidence.Keys{Trusted: []gossh.PublicKey{h.hostKey}}, evidence.Options{})
		if !rep.OK() || rep.RunID == "other-run" || !hasNote(rep, evidence.NoteRunFolderName) {
			t.Errorf("session under another run's folder: OK %v, run %q, notes %v", rep.OK(), rep.RunID, rep.Notes)
		}
	})
	t.Run("untrusted key", func(t *testing.T) {
		if rep := evidence.Verify(dirA, evidence.Keys{Trusted: []gossh.PublicKey{h.client.PublicKey()}}, evidence.Options{}); rep.OK() {
			t.Error("verified against a key that did not sign")
		}
	})
}

func hasNote(rep *evidence.Report, kind evidence.Kind) bool {
	for _, n := range rep.Notes {
		if n.Kind == kind {
			return true
		}
	}
	return false
}

// rechainAfterEdit forges the way someone with write access but without the
// host key would: change output bytes, fix their data digest, and recompute
// every later record's previous hash. Only the signatures remain wrong.
func rechainAfterEdit(t *testing.T, d string) {
	t.Helper()
	tsPath := filepath.Join(d, "pty", "typescript")
	ts, _ := os.ReadFile(tsPath)
	ls := logLines(mustRead(t, filepath.Join(d, "pty", vocab.LogFile)))
	prev := ""
	for i, l := range ls {
		var r integrity.Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			r.Prev = prev
		}
		if r.Type == vocab.TypeData && r.Data.Stream == vocab.StreamOut && prev != "" && r.Data.Len > 4 {
			copy(ts[r.Data.Off:], "FAKE")
			sum := sha256.Sum256(ts[r.Data.Off : r.Data.Off+r.Data.Len])
			r.Data.SHA256 = hex.EncodeToString(sum[:])
		}
		line, _ := json.Marshal(r)
		sum := sha256.Sum256(line)
		prev = hex.EncodeToString(sum[:])
		ls[i] = append(line, '\n')
	}
	if err := os.WriteFile(tsPath, ts, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "pty", vocab.LogFile), joinLines(ls), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSidecarKilledMidSession kills the server with SIGKILL while a session
// runs: the verifier must report the session unfinalized, with how far it
// checks out, never OK.
func TestSidecarKilledMidSession(t *testing.T) {
	bin := buildForLiveTest(t)
	work := t.TempDir()
	srv, sshArgs, _ := startServe(t, bin, work, "--sync", "strict", "--ready-file", filepath.Join(work, "ready"))
	cmd := exec.Command("ssh", append(sshArgs, "-tt", "-o", "BatchMode=yes")...)
	stdin, _ := cmd.StdinPipe()
	var out testutil.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	io.WriteString(stdin, "seq 1 5000; echo \"MARK_$((6*7))\"\n")
	waitFor(t, 20*time.Second, "the session's output", func() bool { return strings.Contains(out.String(), "MARK_42") })

	if err := srv.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	srv.Wait()
	dirs, _ := filepath.Glob(filepath.Join(work, "aptl-dev", "captures", "_unbound", "anon-*"))
	if len(dirs) != 1 {
		t.Fatalf("records: %v", dirs)
	}
	key := readHostKey(t, filepath.Join(work, "aptl-dev", "state"))
	rep := evidence.Verify(dirs[0], evidence.Keys{Trusted: []gossh.PublicKey{key}}, evidence.Options{})
	if rep.OK() || rep.Finalized {
		t.Fatal("a session cut by SIGKILL verified as OK")
	}
	if !strings.Contains(fmt.Sprint(rep.Anomalies), "unfinalized") {
		t.Errorf("anomalies do not say unfinalized: %v", rep.Anomalies)
	}
	// With strict durability everything the client saw was in the log.
	ts := mustRead(t, filepath.Join(dirs[0], "pty", "typescript"))
	if mark := bytes.LastIndex(ts, []byte("MARK_42")); rep.LastVerifiedOffset < int64(mark) {
		t.Errorf("verified through typescript offset %d, but the client had seen up to %d", rep.LastVerifiedOffset, mark)
	}

	// The next start states the cut in a signed recovery record; the
	// session stays unfinalized.
	srv2, _, logs := startServe(t, bin, work, "--ready-file", filepath.Join(work, "ready"))
	waitFor(t, 10*time.Second, "the recovery record", func() bool {
		_, err := os.Stat(filepath.Join(dirs[0], "pty", vocab.RecoveryFile))
		return err == nil && strings.Contains(logs.String(), "unfinalized session recovered")
	})
	srv2.Process.Kill()
	rep = evidence.Verify(dirs[0], evidence.Keys{Trusted: []gossh.PublicKey{key}}, evidence.Options{})
	if rep.OK() || !strings.Contains(fmt.Sprint(rep.Anomalies), "the sidecar restarted on") {
		t.Errorf("after recovery: OK=%v anomalies %v", rep.OK(), rep.Anomalies)
	}
}

// startServe runs the built binary's serve subcommand in work on a free
// loopback port and returns it with the ssh arguments it printed and its logs.
func startServe(t *testing.T, bin, work string, extra ...string) (*exec.Cmd, []string, *testutil.LockedBuffer) {
	t.Helper()
	srv := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, extra...)...)
	srv.Dir = work
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.LockedBuffer{}
	srv.Stderr = logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "ssh ") {
				lines <- l
			}
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("serve exited without printing an ssh command; logs:\n%s", logs.String())
		}
		return srv, strings.Fields(l)[1:], logs
	case <-time.After(30 * time.Second):
		t.Fatalf("serve printed no ssh command; logs:\n%s", logs.String())
	}
	return nil, nil, nil
}

func readHostKey(t *testing.T, stateDir string) gossh.PublicKey {
	t.Helper()
	key, _, _, _, err := gossh.ParseAuthorizedKey(mustRead(t, filepath.Join(stateDir, "ssh_host_ed25519_key.pub")))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestControlEventsInChain: the requests a client sent, with the broker's
// decisions, are in the same chain as the bytes; env values other than
// validated ids are not.
func TestControlEventsInChain(t *testing.T) {
	h := newHarness(t)
	c := h.dial(t)
	const canary = "CANARY-d41d8"
	res := rawExec(t, c, map[string]string{"APTL_SESSION_ID": "ev-1", "LD_PRELOAD": "/x.so", "LC_ALL": canary}, "echo hi")
	if res.stdout != "hi\n" {
		t.Fatalf("session did not run: %+v", res)
	}
	h.waitIdle(t)
	dir := h.sessionDir("_unbound", "ev-1")
	if rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{h.hostKey}}, evidence.Options{}); !rep.OK() {
		t.Fatalf("record does not verify: %v", rep.Anomalies)
	}
	var requests []map[string]string
	var open, closing map[string]string
	for _, l := range logLines(mustRead(t, filepath.Join(dir, "pty", vocab.LogFile))) {
		var r integrity.Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		switch r.Type {
		case "request":
			requests = append(requests, r.Attrs)
		case vocab.TypeOpen:
			open = r.Attrs
		case vocab.TypeClose:
			closing = r.Attrs
		}
	}
	find := func(req, name string) map[string]string {
		for _, a := range requests {
			if a["request"] == req && a["name"] == name {
				return a
			}
		}
		return nil
	}
	if a := find("env", "LD_PRELOAD"); a == nil || a["accepted"] != "false" || a["reason"] == "" {
		t.Errorf("refused env not in the chain with its reason: %v", a)
	}
	if a := find("env", "APTL_SESSION_ID"); a == nil || a["value"] != "ev-1" {
		t.Errorf("the validated id is not in the chain: %v", a)
	}
	if a := find("exec", ""); a == nil || a["accepted"] != "true" {
		t.Errorf("exec request not in the chain: %v", requests)
	}
	if open["command"] != "echo hi" || open["APTL_CLIENT_KEY"] == "" || open["APTL_HOST_KEY"] == "" {
		t.Errorf("open record lacks the command or identities: %v", open)
	}
	if closing["APTL_CLOSE_REASON"] != "shell-exited" || closing[vocab.AttrExitCode] != "0" {
		t.Errorf("close record: %v", closing)
	}
	if bytes.Contains(mustRead(t, filepath.Join(dir, "pty", vocab.LogFile)), []byte(canary)) {
		t.Error("an env value other than an id reached the integrity log")
	}
}

// TestVerifyAndExportCommands runs the examiner's commands on a real
// record: verify's exit status and report, and the exported head checked
// by stock ssh-keygen.
func TestVerifyAndExportCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped in -short mode")
	}
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		skipClient(t, "ssh-keygen", "ssh-keygen (Debian openssh-client) not installed")
	}
	h := newHarness(t)
	dir := recordSession(t, h, "cli-1")
	bin := buildCommand(t)
	work := t.TempDir()
	pub := filepath.Join(work, "host.pub")
	if err := os.WriteFile(pub, gossh.MarshalAuthorizedKey(h.hostKey), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "verify", "--key", pub, dir).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "OK") {
		t.Fatalf("verify of an intact record: %v\n%s", err, out)
	}

	tampered := copySession(t, dir)
	edit(t, tampered, "typescript", flipAt(frac(1, 2)))
	out, err = exec.Command(bin, "verify", "--key", pub, "--json", tampered).CombinedOutput()
	var doc struct {
		OK       bool
		Sessions []evidence.Report
	}
	if code := exitCodeOf(err); code != 1 || json.Unmarshal(out, &doc) != nil || doc.OK || len(doc.Sessions) != 1 || len(doc.Sessions[0].Anomalies) == 0 {
		t.Fatalf("verify of a tampered record: exit %d\n%s", code, out)
	}

	if out, err := exec.Command(bin, "export", "--format", "head", "--out", work, dir).CombinedOutput(); err != nil {
		t.Fatalf("export head: %v\n%s", err, out)
	}
	allowed := filepath.Join(work, "allowed_signers")
	if err := os.WriteFile(allowed, append([]byte("aptl-kali-capture "), gossh.MarshalAuthorizedKey(h.hostKey)...), 0o600); err != nil {
		t.Fatal(err)
	}
	keygenVerify := func(msg []byte) error {
		cmd := exec.Command(keygen, "-Y", "verify", "-f", allowed, "-I", "aptl-kali-capture", "-n", integrity.HeadNamespace, "-s", filepath.Join(work, "head.sig"))
		cmd.Stdin = bytes.NewReader(msg)
		return cmd.Run()
	}
	head := mustRead(t, filepath.Join(work, "head.txt"))
	if err := keygenVerify(head); err != nil {
		t.Errorf("ssh-keygen -Y verify rejected the real head: %v", err)
	}
	if err := keygenVerify(bytes.Replace(head, []byte("seq "), []byte("seq 1"), 1)); err == nil {
		t.Error("ssh-keygen -Y verify accepted a modified head")
	}
}

func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
