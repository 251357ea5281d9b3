package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// shellSession is a client-side PTY shell in the shape node ssh2's
// PersistentSession uses: pty-req, env ids, shell, then commands written
// into stdin. It keeps every byte it sent and received for comparison with
// the record.
type shellSession struct {
	tb       testing.TB
	s        *gossh.Session
	stdin    io.WriteCloser
	sent     bytes.Buffer
	received *testutil.LockedBuffer
	stderr   *testutil.LockedBuffer // broker messages; a PTY's own output is all on stdout
	readDone chan error
}

func openShell(tb testing.TB, c *gossh.Client, env map[string]string, rows, cols int) *shellSession {
	tb.Helper()
	s, err := c.NewSession()
	if err != nil {
		tb.Fatal(err)
	}
	for k, v := range env {
		if err := s.Setenv(k, v); err != nil {
			tb.Fatalf("setenv %s: %v", k, err)
		}
	}
	if err := s.RequestPty("xterm", rows, cols, gossh.TerminalModes{gossh.ECHO: 1}); err != nil {
		tb.Fatal(err)
	}
	ss := &shellSession{tb: tb, s: s, received: &testutil.LockedBuffer{}, stderr: &testutil.LockedBuffer{}, readDone: make(chan error, 1)}
	s.Stderr = ss.stderr
	if ss.stdin, err = s.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Shell(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		_, err := io.Copy(ss.received, stdout)
		ss.readDone <- err
	}()
	return ss
}

func (ss *shellSession) send(text string) {
	ss.tb.Helper()
	ss.sent.WriteString(text)
	if _, err := io.WriteString(ss.stdin, text); err != nil {
		ss.tb.Fatalf("write: %v", err)
	}
}

// waitOutput waits until the received bytes match re and returns them.
func (ss *shellSession) waitOutput(re *regexp.Regexp) string {
	ss.tb.Helper()
	var out string
	waitFor(ss.tb, 30*time.Second, "output matching "+re.String(), func() bool {
		out = ss.received.String()
		return re.MatchString(out)
	})
	return out
}

// finish waits for the shell to end and for all output, returning the exit error.
func (ss *shellSession) finish() error {
	ss.tb.Helper()
	werr := ss.s.Wait()
	select {
	case <-ss.readDone:
	case <-time.After(10 * time.Second):
		ss.tb.Fatal("stdout did not reach EOF after the session ended")
	}
	return werr
}

// delimited wraps a command the way the lab's tool servers do: start and end
// markers around it, the end one carrying the exit status.
func delimited(id int, command string) string {
	return fmt.Sprintf("echo \"D_START_%d\"; %s; echo \"D_END_%d:$?\"\n", id, command, id)
}

var (
	startRE = regexp.MustCompile(`D_START_(\d+)\r\n`)
	endRE   = regexp.MustCompile(`D_END_(\d+):(\d+)\r\n`)
)

func TestPersistentShellProtocol(t *testing.T) { testPersistentShellProtocol(t) }

// testPersistentShellProtocol is TestPersistentShellProtocol with extra harness options (agent_suites_test.go runs it
// with the agent adapter).
func testPersistentShellProtocol(t *testing.T, opts ...harnessOption) {
	h := newHarness(t, opts...)
	c := h.dial(t)
	env := map[string]string{"APTL_SESSION_ID": "proto-1", "APTL_RUN_ID": "run-a", "APTL_TRACE_ID": "trace-9", "LANG": "C.UTF-8"}
	ss := openShell(t, c, env, 40, 120)

	// 200 commands back to back, without waiting for any of them.
	const n = 200
	bodies := []string{"true", "false", "(exit 3)"}
	wantCodes := []string{"0", "1", "3"}
	var batch strings.Builder
	for i := 0; i < n; i++ {
		batch.WriteString(delimited(i, bodies[i%len(bodies)]))
	}
	ss.send(batch.String())
	out := ss.waitOutput(regexp.MustCompile(fmt.Sprintf(`D_END_%d:\d+\r\n`, n-1)))
	starts, ends := startRE.FindAllStringSubmatch(out, -1), endRE.FindAllStringSubmatch(out, -1)
	if len(starts) != n || len(ends) != n {
		t.Fatalf("got %d start and %d end markers, want %d each", len(starts), len(ends), n)
	}
	for i := 0; i < n; i++ {
		if starts[i][1] != strconv.Itoa(i) || ends[i][1] != strconv.Itoa(i) {
			t.Fatalf("marker %d out of order: start %s end %s", i, starts[i][1], ends[i][1])
		}
		if ends[i][2] != wantCodes[i%len(wantCodes)] {
			t.Errorf("command %d (%s) exit = %s, want %s", i, bodies[i%3], ends[i][2], wantCodes[i%3])
		}
	}

	// A command printing 10,000 lines arrives whole and in order.
	ss.send("echo \"SEQ_BEGIN\"; seq 1 10000; echo \"SEQ_DONE\"\n")
	out = ss.waitOutput(regexp.MustCompile(`SEQ_DONE\r\n`))
	_, body, _ := strings.Cut(out[strings.LastIndex(out, "SEQ_BEGIN\r\n"):], "SEQ_BEGIN\r\n")
	body, _, _ = strings.Cut(body, "SEQ_DONE\r\n")
	var want strings.Builder
	for i := 1; i <= 10000; i++ {
		fmt.Fprintf(&want, "%d\r\n", i)
	}
	if body != want.String() {
		t.Errorf("seq output differs: got %d bytes, want %d", len(body), want.Len())
	}

	// Unicode, quotes and the env ids reach the shell unaltered.
	ss.send(`printf '%s\n' "U:héllo ✓ 'single' \"double\" \$HOME:$APTL_SESSION_ID:$APTL_RUN_ID:$APTL_TRACE_ID"` + "\n")
	ss.waitOutput(regexp.MustCompile(regexp.QuoteMeta(`U:héllo ✓ 'single' "double" $HOME:proto-1:run-a:trace-9`) + "\r\n"))

	// Input the shell does not echo is still recorded as input.
	const secret = "hunter2-not-echoed"
	ss.send("stty -echo; echo READY_SECRET; read -s SECRET; stty echo; echo \"LEN=${#SECRET}\"\n")
	ss.waitOutput(regexp.MustCompile(`READY_SECRET\r\n`))
	ss.send(secret + "\n")
	ss.waitOutput(regexp.MustCompile(fmt.Sprintf(`LEN=%d\r\n`, len(secret))))

	ss.send("exit 3\n")
	var exitErr *gossh.ExitError
	if err := ss.finish(); !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
		t.Fatalf("session ended with %v, want exit status 3", err)
	}
	h.waitIdle(t)

	received := []byte(ss.received.String())
	if bytes.Contains(received, []byte(secret)) {
		t.Error("the non-echoed secret appears in the output the client received")
	}
	dir := h.sessionDir("run-a", "proto-1")
	if got := replay(t, dir, "out"); !bytes.Equal(got, received) {
		t.Errorf("scriptreplay --stream out differs from what the client received: %d vs %d bytes, first difference at %d",
			len(got), len(received), firstDiff(got, received))
	}
	if got := replay(t, dir, "in"); !bytes.Equal(got, ss.sent.Bytes()) {
		t.Errorf("scriptreplay --stream in differs from what the client sent: %d vs %d bytes, first difference at %d",
			len(got), ss.sent.Len(), firstDiff(got, ss.sent.Bytes()))
	}
	checkRecordFiles(t, dir)
	hdr := timingHeaders(t, dir)
	for k, v := range map[string]string{
		"APTL_SESSION_ID": "proto-1", "APTL_RUN_ID": "run-a", "APTL_TRACE_ID": "trace-9",
		"APTL_ADAPTER": h.adapter, "APTL_CLOSE_REASON": "shell-exited", "EXIT_CODE": "3",
		"COLUMNS": "120", "LINES": "40", "TERM": "xterm",
	} {
		if hdr[k] != v {
			t.Errorf("timing header %s = %q, want %q", k, hdr[k], v)
		}
	}
	ts, _ := os.ReadFile(filepath.Join(dir, "pty", "typescript"))
	if !bytes.HasSuffix(ts, []byte("[COMMAND_EXIT_CODE=\"3\"]\n")) {
		t.Errorf("typescript trailer missing or wrong: %q", ts[max(0, len(ts)-80):])
	}
	if logs := h.logs.String(); strings.Contains(logs, secret) || strings.Contains(logs, "héllo") {
		t.Error("server logs contain transcript bytes")
	}
}

// checkRecordFiles asserts the capture folder's permissions (docs/RECORD.md, "What
// a session leaves").
func checkRecordFiles(tb testing.TB, dir string) {
	tb.Helper()
	for path, want := range map[string]os.FileMode{
		dir:                                     0o700 | os.ModeDir,
		filepath.Join(dir, "pty"):               0o700 | os.ModeDir,
		filepath.Join(dir, "pty", "typescript"): 0o600,
		filepath.Join(dir, "pty", "timing"):     0o600,
	} {
		st, err := os.Stat(path)
		if err != nil {
			tb.Errorf("stat: %v", err)
			continue
		}
		if got := st.Mode() & (os.ModeDir | os.ModePerm); got != want {
			tb.Errorf("%s mode = %v, want %v", path, got, want)
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestRawModeByteFidelity(t *testing.T) { testRawModeByteFidelity(t) }

// testRawModeByteFidelity is TestRawModeByteFidelity with extra harness options (agent_suites_test.go runs it
// with the agent adapter).
func testRawModeByteFidelity(t *testing.T, opts ...harnessOption) {
	h := newHarness(t, opts...)
	c := h.dial(t)
	ss := openShell(t, c, map[string]string{"APTL_SESSION_ID": "raw-1"}, 24, 80)
	ss.send("stty raw -echo; echo RAW_READY; cat\n")
	// With -opost, echo's newline is no longer translated.
	ss.waitOutput(regexp.MustCompile("RAW_READY\n"))
	before := len(ss.received.String())

	var payload []byte
	for i := 0; i < 256; i++ {
		payload = append(payload, byte(i))
	}
	payload = append(payload, "\nlone\n\r\r\nend"...)
	ss.send(string(payload))
	waitFor(t, 10*time.Second, "payload echoed by cat", func() bool {
		return len(ss.received.String()) >= before+len(payload)
	})
	if got := []byte(ss.received.String()[before:]); !bytes.Equal(got, payload) {
		t.Fatalf("client received altered bytes: first difference at %d of %d", firstDiff(got, payload), len(payload))
	}

	// Closing from the client side hangs the shell up and finalizes the record.
	if err := ss.s.Close(); err != nil {
		t.Fatal(err)
	}
	h.waitIdle(t)
	dir := h.sessionDir("_unbound", "raw-1")
	if got := replay(t, dir, "out"); !bytes.Equal(got, []byte(ss.received.String())) {
		t.Errorf("recorded output differs from received at byte %d", firstDiff(got, []byte(ss.received.String())))
	}
	if got := replay(t, dir, "in"); !bytes.Equal(got, ss.sent.Bytes()) {
		t.Errorf("recorded input differs from sent at byte %d", firstDiff(got, ss.sent.Bytes()))
	}
	if r := timingHeaders(t, dir)["APTL_CLOSE_REASON"]; r != "client-closed" {
		t.Errorf("close reason = %q, want client-closed", r)
	}
}

// TestTerminalSemantics checks what users of a real terminal rely on:
// window changes, ^C, job control, and exit status.
func TestTerminalSemantics(t *testing.T) { testTerminalSemantics(t) }

// testTerminalSemantics is TestTerminalSemantics with extra harness options (agent_suites_test.go runs it
// with the agent adapter).
func testTerminalSemantics(t *testing.T, opts ...harnessOption) {
	h := newHarness(t, opts...)
	ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "term-1"}, 24, 80)

	if err := ss.s.WindowChange(50, 132); err != nil {
		t.Fatal(err)
	}
	ss.send("echo \"SIZE=$(stty size)\"\n")
	ss.waitOutput(regexp.MustCompile(`SIZE=50 132\r\n`))
	// An absurd size is refused and leaves the terminal as it was.
	if err := ss.s.WindowChange(0, 99999); err != nil {
		t.Fatal(err)
	}
	ss.send("echo \"SIZE2=$(stty size)\"\n")
	ss.waitOutput(regexp.MustCompile(`SIZE2=50 132\r\n`))

	// ^C interrupts the foreground job: without it the shell would not
	// answer for 300 s. SLEEPING is printed by the foreground job itself, so
	// the ^C cannot reach bash before the job owns the terminal.
	ss.send("sh -c 'echo SLEEPING; exec sleep 300'; echo NOT_INTERRUPTED\n")
	ss.waitOutput(regexp.MustCompile(`SLEEPING\r\n`))
	ss.send("\x03")
	ss.send("echo \"ALIVE_$((1+1))\"\n")
	out := ss.waitOutput(regexp.MustCompile(`ALIVE_2\r\n`))
	if strings.Contains(out, "\nNOT_INTERRUPTED\r\n") {
		t.Error("the foreground job was not interrupted")
	}

	ss.send("sleep 100 & jobs; kill %1; wait; echo \"JOBS_DONE\"\n")
	out = ss.waitOutput(regexp.MustCompile(`JOBS_DONE\r\n`))
	if !regexp.MustCompile(`\[1\]\+ +Running +sleep 100 &`).MatchString(out) {
		t.Errorf("job control: no running job listed")
	}

	ss.send("exit 7\n")
	var exitErr *gossh.ExitError
	if err := ss.finish(); !errors.As(err, &exitErr) || exitErr.ExitStatus() != 7 {
		t.Fatalf("session ended with %v, want exit status 7", err)
	}
	h.waitIdle(t)
	timing, err := os.ReadFile(filepath.Join(h.sessionDir("_unbound", "term-1"), "pty", "timing"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(timing), " SIGWINCH "); n != 1 || !strings.Contains(string(timing), "SIGWINCH ROWS=50 COLS=132") {
		t.Errorf("timing has %d SIGWINCH entries, want exactly the valid one", n)
	}
}
