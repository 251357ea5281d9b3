package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
)

// Tests of the session tools: `ls` and `play` (docs/RECORD.md, "Listing
// sessions: ls" and "Playing a session: play").

// runSplit runs the built binary with a deadline and returns its stdout,
// its stderr and its exit code.
func runSplit(t *testing.T, bin string, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within the deadline; stderr:\n%s", filepath.Base(bin), args, e.Bytes())
	}
	return o.Bytes(), e.Bytes(), exitCodeOf(err)
}

// recordShell runs an interactive shell on a PTY session of h, types a script (with
// control characters, a bare CR, invalid UTF-8 and an unechoed `read -s`)
// and returns the session's folder once it is finalized.
func recordShell(t *testing.T, h *harness, run, id string) string {
	t.Helper()
	// An interactive bash without startup files: the account's own may
	// do anything (and on some hosts wait on tools that are missing).
	s, stdin, stdout := startSession(t, h, run, id, true, "exec bash --norc --noprofile -i")
	// Each step waits for the output of the one before (quoted so that
	// the echo of the typed line does not match): bash's `read -s`
	// flushes input typed ahead of it.
	var out bytes.Buffer
	for _, step := range []struct{ typed, await string }{
		{`printf '\033[1;31mred\033[0m\rover\n\xff\xfe caf\xc3\xa9\n'; echo step-'1'`, "step-1\r\n"},
		{`stty -echo; echo Pass'word:'; read -s secret; stty echo; echo "read ${#secret}"`, "Password:\r\n"},
		{"pass-canary", "read 11"},
		{"seq 1 200; echo step-'3'", "step-3\r\n"},
		{"exit 7", ""},
	} {
		if _, err := stdin.Write([]byte(step.typed + "\n")); err != nil {
			t.Fatal(err)
		}
		if step.await != "" {
			readUntil(t, stdout, &out, step.await, 10*time.Second)
		}
	}
	go io.Copy(io.Discard, stdout)
	timer := time.AfterFunc(20*time.Second, func() { s.Close() })
	defer timer.Stop()
	s.Wait()
	h.waitIdle(t)
	return h.sessionDir(run, id)
}

// startSession starts command on a new session of h with the ids run and
// id, on a PTY when pty is set, and returns it with its stdin and stdout;
// the session is closed when the test ends.
func startSession(t *testing.T, h *harness, run, id string, pty bool, command string) (*gossh.Session, io.WriteCloser, io.Reader) {
	t.Helper()
	s, err := h.dial(t).NewSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.Setenv("APTL_RUN_ID", run)
	s.Setenv("APTL_SESSION_ID", id)
	if pty {
		if err := s.RequestPty("xterm", 24, 80, gossh.TerminalModes{gossh.ECHO: 1}); err != nil {
			t.Fatal(err)
		}
	}
	stdin, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(command); err != nil {
		t.Fatal(err)
	}
	return s, stdin, stdout
}

// TestPlayMatchesScriptreplay: play's stdout is byte for byte what
// scriptreplay --stream out writes for the same session (less the newline
// scriptreplay adds at the end); with --input it is the typescript's body,
// typed input included, in the order recorded.
func TestPlayMatchesScriptreplay(t *testing.T) {
	bin := buildCommand(t)
	h := newHarness(t)
	dir := recordShell(t, h, "play", "shell-1")
	want := replay(t, dir, "out")
	got, stderr, code := runSplit(t, bin, "play", "--speed", "1000", "--max-delay", "1ms", dir)
	if code != 0 || !bytes.Equal(got, want) {
		t.Fatalf("play: exit %d (%s), %d bytes; scriptreplay --stream out: %d bytes\nplay:         %q\nscriptreplay: %q", code, stderr, len(got), len(want), got, want)
	}
	if !bytes.Contains(got, []byte("\x1b[1;31mred")) || bytes.Contains(got, []byte("pass-canary")) {
		t.Errorf("play's output lacks the escapes or holds the unechoed input: %q", got)
	}

	ts, err := os.ReadFile(filepath.Join(dir, "pty", "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.IndexByte(ts, '\n') + 1
	body := ts[start:bytes.LastIndex(ts, []byte("\nScript done on "))]
	withInput, stderr, code := runSplit(t, bin, "play", "--input", "--speed", "1000", "--max-delay", "1ms", dir)
	if code != 0 || !bytes.Equal(withInput, body) {
		t.Errorf("play --input: exit %d (%s)\n got %q\nwant the typescript's body %q", code, stderr, withInput, body)
	}
	if !bytes.Contains(withInput, []byte("pass-canary")) {
		t.Error("play --input lacks the typed input")
	}
}

// TestPlayFollowsLiveSession: play --follow started while a session is
// being recorded prints its output as it is recorded, keeps following,
// and exits once the session's close record is written, having printed
// every byte the client received.
func TestPlayFollowsLiveSession(t *testing.T) {
	bin := buildCommand(t)
	h := newHarness(t)
	s, stdin, stdout := startSession(t, h, "live", "follow-1", false, "cat")
	var received bytes.Buffer
	stdin.Write([]byte("first chunk\n"))
	readUntil(t, stdout, &received, "first chunk\n", 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	play := exec.CommandContext(ctx, bin, "play", "--follow", h.sessionDir("live", "follow-1"))
	playOut, err := play.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var playErr bytes.Buffer
	play.Stderr = &playErr
	if err := play.Start(); err != nil {
		t.Fatal(err)
	}
	defer play.Process.Kill()
	var followed bytes.Buffer
	readUntil(t, playOut, &followed, "first chunk\n", 10*time.Second)

	// Written after play started: play must follow the growing files.
	for i := range 50 {
		line := strings.Repeat("x", i) + " later\n"
		stdin.Write([]byte(line))
		readUntil(t, stdout, &received, line, 10*time.Second)
	}
	readUntil(t, playOut, &followed, strings.Repeat("x", 49)+" later\n", 10*time.Second)
	if h.srv.ActiveSessions() != 1 {
		t.Fatal("the session ended before play had followed it")
	}
	done := make(chan error, 1)
	go func() {
		rest, err := io.ReadAll(playOut)
		followed.Write(rest)
		if err == nil {
			err = play.Wait()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("play --follow exited (%v) while the session was still open; stderr %s", err, playErr.Bytes())
	case <-time.After(300 * time.Millisecond):
	}
	stdin.Close()
	rest, _ := io.ReadAll(stdout)
	received.Write(rest)
	s.Wait()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("play --follow: %v; stderr %s", err, playErr.Bytes())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("play --follow did not exit after the session's close record")
	}
	if !bytes.Equal(followed.Bytes(), received.Bytes()) {
		t.Errorf("play --follow printed %d bytes, the client received %d\n got %q\nwant %q", followed.Len(), received.Len(), followed.Bytes(), received.Bytes())
	}
}

// TestPlayRefusesHostileRecords: a timing line the format does not allow,
// an entry for more bytes than the typescript holds, and a linked timing
// file stop play with an error naming what is wrong; nothing past what
// the typescript holds is printed.
func TestPlayRefusesHostileRecords(t *testing.T) {
	bin := buildCommand(t)
	signer := newTestSigner(t)
	for _, tt := range []struct {
		name, want string
		spoil      func(t *testing.T, pty string)
	}{
		{"entry past the typescript", "accounts for 1000000 bytes", func(t *testing.T, pty string) {
			appendTo(t, filepath.Join(pty, "timing"), "O 0.000001 1000000\n")
		}},
		{"malformed line", scriptfmt.ErrTimingLine.Error(), func(t *testing.T, pty string) {
			appendTo(t, filepath.Join(pty, "timing"), "O 1e9 5\n")
		}},
		{"unfinished line", "the last line has no newline", func(t *testing.T, pty string) {
			appendTo(t, filepath.Join(pty, "timing"), "O 0.000001 3")
		}},
		{"linked timing", "symbolic link", func(t *testing.T, pty string) {
			tm := filepath.Join(pty, "timing")
			os.Rename(tm, tm+".real")
			if err := os.Symlink(tm+".real", tm); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := recordFinalized(t, t.TempDir(), "r", "s", signer)
			tt.spoil(t, filepath.Join(dir, "pty"))
			for _, follow := range []bool{false, true} {
				args := []string{"play", "--speed", "1000"}
				if follow {
					args = append(args, "--follow")
				}
				out, stderr, code := runSplit(t, bin, append(args, dir)...)
				if code != 1 || !strings.Contains(string(stderr), tt.want) {
					t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", args, code, stderr, tt.want)
				}
				if len(out) > len("hello from the session\r\n") {
					t.Errorf("%v printed %q, more than the session's output", args, out)
				}
			}
		})
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// lsEntry is one object of `ls --json`.
type lsEntry struct {
	Run         string  `json:"run"`
	Session     string  `json:"session"`
	Dir         string  `json:"dir"`
	State       string  `json:"state"`
	User        string  `json:"user"`
	ClientKey   string  `json:"client_key"`
	Start       string  `json:"start"`
	Seconds     float64 `json:"duration_seconds"`
	ExitCode    *int    `json:"exit_code"`
	Signal      string  `json:"signal"`
	CloseReason string  `json:"close_reason"`
	BytesIn     int64   `json:"bytes_in"`
	BytesOut    int64   `json:"bytes_out"`
	Error       string  `json:"error"`
}

// TestLsListsSessions: ls lists a finalized session with its exit code,
// one ended by a signal, one still being recorded, and the hostile
// entries of a capture root (a linked run, a file, a folder with no log,
// a name with control characters) each as a broken line, from the
// records alone; the table is aligned and holds no control character.
func TestLsListsSessions(t *testing.T) {
	bin := buildCommand(t)
	h := newHarness(t)
	runExec := func(id, command string) {
		s, err := h.dial(t).NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.Setenv("APTL_RUN_ID", "lab")
		s.Setenv("APTL_SESSION_ID", id)
		s.Run(command)
	}
	runExec("done-1", "printf 12345; exit 3")
	runExec("killed-1", "kill -KILL $$")
	live, err := h.dial(t).NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	live.Setenv("APTL_RUN_ID", "lab")
	live.Setenv("APTL_SESSION_ID", "live-1")
	if err := live.Start("sleep 30"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the live session's folder", func() bool {
		_, err := os.Stat(filepath.Join(h.sessionDir("lab", "live-1"), "pty", "integrity.jsonl"))
		return err == nil
	})
	lab := filepath.Join(h.root, "lab")
	// A copy of the live session holds no recorder's lock: what a crash
	// leaves looks the same, so ls says unfinalized, as verify does.
	if out, err := exec.Command("cp", "-a", h.sessionDir("lab", "live-1"), filepath.Join(lab, "cut-1")).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v: %s", err, out)
	}
	writeFile(t, filepath.Join(lab, "a-file"), []byte("not a session"))
	os.Mkdir(filepath.Join(lab, "empty"), 0o700)
	os.Mkdir(filepath.Join(lab, "evil\x1b[2J\x1b[Hname"), 0o700)
	if err := os.Symlink(lab, filepath.Join(h.root, "linked-run")); err != nil {
		t.Fatal(err)
	}

	out, stderr, code := runSplit(t, bin, "ls", "--json", h.root)
	if code != 0 {
		t.Fatalf("ls --json: exit %d: %s", code, stderr)
	}
	var rows []lsEntry
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, out)
	}
	byID := map[string]lsEntry{}
	for _, r := range rows {
		if filepath.Base(r.Dir) != "cut-1" {
			byID[r.Run+"/"+r.Session] = r
		}
	}
	fp := gossh.FingerprintSHA256(h.client.PublicKey())
	done := byID["lab/done-1"]
	if done.State != "finalized" || done.ExitCode == nil || *done.ExitCode != 3 || done.CloseReason != "shell-exited" ||
		done.User != h.user || done.ClientKey != fp || done.BytesOut != 5 || done.Start == "" {
		t.Errorf("done-1: %+v", done)
	}
	if k := byID["lab/killed-1"]; k.State != "finalized" || k.Signal != "KILL" {
		t.Errorf("killed-1: %+v, want finalized by signal KILL", k)
	}
	if l := byID["lab/live-1"]; l.State != "in-progress" || l.ExitCode != nil || l.ClientKey != fp {
		t.Errorf("live-1: %+v, want in-progress with no exit code", l)
	}
	byDir := map[string]lsEntry{}
	for _, r := range rows {
		byDir[filepath.Base(r.Dir)] = r
	}
	if c := byDir["cut-1"]; c.State != "unfinalized" || c.Session != "live-1" {
		t.Errorf("cut-1: %+v, want unfinalized (a copy of a live session holds no lock)", c)
	}
	for _, id := range []string{"lab/a-file", "lab/empty", "lab/evil\x1b[2J\x1b[Hname", "linked-run/"} {
		if b, ok := byID[id]; !ok || b.State != "broken" || b.Error == "" || b.Start != "" {
			t.Errorf("%q: %+v (listed %v), want a broken line saying why", id, b, ok)
		}
	}
	if !strings.Contains(byID["linked-run/"].Error, "symbolic link") {
		t.Errorf("linked run: %q, want it named a symbolic link, not followed", byID["linked-run/"].Error)
	}

	table, _, code := runSplit(t, bin, "ls", "--run", "lab", h.root)
	if code != 0 {
		t.Fatalf("ls: exit %d", code)
	}
	checkTable(t, string(table), 7)
	if !strings.Contains(string(table), `evil\x1b[2J\x1b[Hname`) {
		t.Errorf("the hostile name is not shown escaped:\n%s", table)
	}

	// --verify runs the verifier on each session: the broken entries fail it.
	pub := writePubKey(t, h.hostKey)
	verified, _, code := runSplit(t, bin, "ls", "--verify", "--key", pub, "--run", "lab", h.root)
	if code != 1 || !regexp.MustCompile(`(?m)^lab +done-1 .* ok +finalized$`).Match(verified) ||
		!regexp.MustCompile(`(?m)^lab +empty .* FAIL +broken: `).Match(verified) {
		t.Errorf("ls --verify: exit %d, want 1 with done-1 ok and the empty folder FAIL:\n%s", code, verified)
	}
	if _, stderr, code := runSplit(t, bin, "ls", "--verify", h.root); code != 2 || !strings.Contains(string(stderr), "--verify: needs --key") {
		t.Errorf("ls --verify without --key: exit %d, %q", code, stderr)
	}

	empty, _, code := runSplit(t, bin, "ls", "--json", t.TempDir())
	if code != 0 || strings.TrimSpace(string(empty)) != "[]" {
		t.Errorf("ls --json on an empty root: exit %d, %q; want []", code, empty)
	}
}

// checkTable checks ls's table: a header and rows lines, no control
// character, and every row's STATE cell starting under the header's.
func checkTable(t *testing.T, table string, rows int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if len(lines) != rows+1 {
		t.Fatalf("%d lines, want a header and %d rows:\n%s", len(lines), rows, table)
	}
	col := strings.Index(lines[0], "STATE")
	for _, line := range lines {
		if strings.ContainsFunc(line, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Errorf("control character in %q", line)
		}
		cell := string([]rune(line)[min(col, len([]rune(line))):])
		known := false
		for _, state := range []string{"STATE", "finalized", "in-progress", "unfinalized", "recovered", "broken"} {
			known = known || strings.HasPrefix(cell, state)
		}
		if !known {
			t.Errorf("not aligned: %q has %q under STATE", line, cell)
		}
	}
}

// TestExportAsciicastInput: `export --format asciicast` leaves the typed
// input out of the shareable copy; --input adds it as "i" events.
func TestExportAsciicastInput(t *testing.T) {
	bin := buildCommand(t)
	dir := recordFinalized(t, t.TempDir(), "r", "s", newTestSigner(t)) // typed "exit\r"
	events := func(cast []byte) (kinds []string) {
		for _, line := range strings.Split(strings.TrimSpace(string(cast)), "\n")[1:] {
			var ev []any
			if err := json.Unmarshal([]byte(line), &ev); err != nil || len(ev) != 3 {
				t.Fatalf("event %q: %v", line, err)
			}
			kinds = append(kinds, ev[1].(string))
		}
		return kinds
	}
	shared, stderr, code := runSplit(t, bin, "export", "--format", "asciicast", dir)
	if code != 0 || strings.Contains(strings.Join(events(shared), ","), "i") || bytes.Contains(shared, []byte("exit")) {
		t.Errorf("export: exit %d (%s), events %v; want no input", code, stderr, events(shared))
	}
	full, stderr, code := runSplit(t, bin, "export", "--format", "asciicast", "--input", dir)
	if code != 0 || !slices.Contains(events(full), "i") || !bytes.Contains(full, []byte(`"exit\r"`)) {
		t.Errorf("export --input: exit %d (%s), %s; want the input event", code, stderr, full)
	}
}
