package recorder

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
)

// needScriptreplay returns the path of util-linux scriptreplay, skipping the
// test when it is missing: these tests use the real tool as the acceptance
// check and cannot run without it.
func needScriptreplay(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("scriptreplay")
	if err != nil {
		t.Skip("scriptreplay (util-linux >= 2.35, package bsdutils) not on PATH; install it to run the replay acceptance tests")
	}
	return bin
}

// replay runs scriptreplay on a session's record and returns what it prints
// for one stream (out, in, signal or info). `-c never` keeps CR bytes of the
// input stream, which the default auto mode rewrites to '\n'; -d and -m make
// the replay instant.
func replay(t *testing.T, bin, dir, stream string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pty := filepath.Join(dir, "pty")
	cmd := exec.CommandContext(ctx, bin,
		"-T", filepath.Join(pty, "timing"), "-B", filepath.Join(pty, "typescript"),
		"--stream", stream, "-c", "never", "-d", "1000000", "-m", "0.0001")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scriptreplay --stream %s: %v; stderr: %q", stream, err, stderr.String())
	}
	return out
}

// assertSameBytes compares without dumping the transcripts: on mismatch it
// reports lengths and the first differing offset.
func assertSameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Errorf("%s: got %d bytes, want %d; first difference at offset %d", what, len(got), len(want), i)
}

type step struct {
	stream     byte // 'I', 'O', or 'S' for a resize
	p          []byte
	rows, cols int
}

// play feeds steps to s and returns the concatenated input and output bytes.
func play(t *testing.T, s *Session, steps []step) (in, out []byte) {
	t.Helper()
	for _, st := range steps {
		var err error
		switch st.stream {
		case 'I':
			err, in = s.Input(st.p), append(in, st.p...)
		case 'O':
			err, out = s.Output(st.p), append(out, st.p...)
		case 'S':
			err = s.Resize(st.rows, st.cols)
		}
		if err != nil {
			t.Fatalf("write %c: %v", st.stream, err)
		}
	}
	return in, out
}

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func reversed(p []byte) []byte {
	r := make([]byte, len(p))
	for i, c := range p {
		r[len(p)-1-i] = c
	}
	return r
}

func roundTripSteps() []step {
	all := allBytes()
	big := bytes.Repeat(all, 40) // larger than scriptreplay's BUFSIZ chunks
	return []step{
		{stream: 'O', p: all},
		{stream: 'I', p: []byte("\n")},
		{stream: 'O', p: []byte("\r\r\n")},
		{stream: 'I', p: reversed(all)},
		{stream: 'S', rows: 40, cols: 120},
		{stream: 'O', p: []byte("\n")},
		{stream: 'I', p: []byte("\r\r\n")},
		{stream: 'O', p: reversed(all)},
		{stream: 'I', p: []byte("\r")},
		{stream: 'I', p: all},
		{stream: 'O', p: big},
		{stream: 'S', rows: 24, cols: 80},
		{stream: 'O', p: []byte("\x00")},
	}
}

func TestReplayRoundTrip(t *testing.T) {
	bin := needScriptreplay(t)
	s := newTestSession(t, Meta{
		RunID: "run-1", SessionID: "s1", Shell: "/bin/bash",
		Term: "xterm-256color", TTY: "/dev/pts/3", Rows: 24, Cols: 80,
		Headers: []Header{{Name: "APTL_RUN_ID", Value: "run-1"}},
	})
	in, out := play(t, s, roundTripSteps())
	if err := s.Close(3, Header{Name: "APTL_CLOSE_REASON", Value: "exit"}); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// scriptreplay prints one "\n" after the last step.
	assertSameBytes(t, "--stream out", replay(t, bin, s.Dir(), "out"), append(out, '\n'))
	assertSameBytes(t, "--stream in", replay(t, bin, s.Dir(), "in"), append(in, '\n'))

	sig := string(replay(t, bin, s.Dir(), "signal"))
	if !regexp.MustCompile(`(?s)^SIGWINCH +ROWS=40 COLS=120\nSIGWINCH +ROWS=24 COLS=80\n`).MatchString(sig) {
		t.Errorf("--stream signal = %q", sig)
	}
	gotIn, gotOut := s.Bytes()
	if gotIn != int64(len(in)) || gotOut != int64(len(out)) {
		t.Errorf("Bytes() = %d, %d; want %d, %d", gotIn, gotOut, len(in), len(out))
	}
}

// TestHeaderValuesCannotBreakLines puts newlines, timing-entry look-alikes and
// terminal escapes in every header value and checks that each header stays
// one line and the body still replays exactly.
func TestHeaderValuesCannotBreakLines(t *testing.T) {
	bin := needScriptreplay(t)
	const evil = "x\nO 0.000000 5\r\x1b[2J\x1b]0;pwn\x07\x00\x7f\u202e\xff\"q\"\\"
	const escaped = `x\nO 0.000000 5\r\x1b[2J\x1b]0;pwn\a\x00\x7f\u202e\xff"q"\\`
	s := newTestSession(t, Meta{
		RunID: "r", SessionID: "s", Command: evil, Shell: evil, Term: evil, TTY: evil,
		Rows: 24, Cols: 80, Headers: []Header{{Name: "APTL_NOTE", Value: evil}},
	})
	in, out := play(t, s, []step{{stream: 'O', p: []byte("body\r\n")}, {stream: 'I', p: []byte("q\r")}})
	if err := s.Close(1, Header{Name: "APTL_CLOSE_REASON", Value: evil}); err != nil {
		t.Fatalf("Close: %v", err)
	}
	assertSameBytes(t, "--stream out", replay(t, bin, s.Dir(), "out"), append(out, '\n'))
	assertSameBytes(t, "--stream in", replay(t, bin, s.Dir(), "in"), append(in, '\n'))

	ts := readRecord(t, s.Dir(), "typescript")
	first, _, _ := strings.Cut(ts, "\n")
	quoted := strings.ReplaceAll(escaped, `"q"`, `\"q\"`)
	wantLine := `COMMAND="` + quoted + `" TERM="` + quoted + `" TTY="` + quoted + `" COLUMNS="80" LINES="24"]`
	if !strings.HasSuffix(first, wantLine) {
		t.Errorf("typescript header line = %q, want suffix %q", first, wantLine)
	}

	hs := timingHeaders(t, readRecord(t, s.Dir(), "timing"))
	for _, name := range []string{"TERM", "TTY", "SHELL", "COMMAND", "APTL_NOTE", "APTL_CLOSE_REASON"} {
		if v, _ := headerValue(hs, name); v != escaped {
			t.Errorf("H %s = %q, want %q", name, v, escaped)
		}
	}
	// scriptreplay itself must read back each H line as one header, printed
	// as "%10s: %s" of the name and the rest of the line (leading space kept).
	var want strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&want, "%10s:  %s\n", h.Name, h.Value)
	}
	want.WriteString("\n")
	if info := replay(t, bin, s.Dir(), "info"); string(info) != want.String() {
		t.Errorf("--stream info:\n got %q\nwant %q", info, want.String())
	}
}

func TestLongHeaderValueTruncatedInTimingOnly(t *testing.T) {
	bin := needScriptreplay(t)
	long := strings.Repeat("\x1b", 10000) // escapes to 40000 bytes
	s := newTestSession(t, Meta{RunID: "r", SessionID: "s", Command: long})
	in, out := play(t, s, []step{{stream: 'O', p: []byte("after\n")}, {stream: 'I', p: []byte("x")}})
	if err := s.Close(0); err != nil {
		t.Fatalf("Close: %v", err)
	}
	assertSameBytes(t, "--stream out", replay(t, bin, s.Dir(), "out"), append(out, '\n'))
	assertSameBytes(t, "--stream in", replay(t, bin, s.Dir(), "in"), append(in, '\n'))

	cmd, _ := headerValue(timingHeaders(t, readRecord(t, s.Dir(), "timing")), "COMMAND")
	if len(cmd) > scriptfmt.MaxHeaderValue || !strings.HasSuffix(cmd, scriptfmt.TruncMark) ||
		strings.Trim(strings.TrimSuffix(cmd, scriptfmt.TruncMark), `\x1b`) != "" {
		t.Errorf("H COMMAND: %d bytes, suffix %q", len(cmd), cmd[max(len(cmd)-20, 0):])
	}
	first, _, _ := strings.Cut(readRecord(t, s.Dir(), "typescript"), "\n")
	if !strings.Contains(first, strings.Repeat(`\x1b`, 10000)+`"`) {
		t.Errorf("typescript header lost the full command (%d bytes)", len(first))
	}
}

// TestExactFormat pins the files byte for byte against script(1)'s format,
// with an injected clock.
func TestExactFormat(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 11, 30, 16, 18, 11, 0, time.UTC)}
	s, err := create(t.TempDir(), Meta{
		RunID: "r", SessionID: "s", Command: `printf "hi\n"; exit 3`, Shell: "/bin/bash",
		Term: "xterm", TTY: "/dev/pts/0", Rows: 24, Cols: 80,
		Headers: []Header{{Name: "APTL_RUN_ID", Value: "r"}},
	}, testOptions(), clk.now)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	clk.advance(10237*time.Microsecond + 999*time.Nanosecond)
	mustOK(t, s.Output([]byte("hi\r\n")))
	clk.advance(500 * time.Millisecond)
	mustOK(t, s.Input([]byte("abc")))
	clk.advance(1100 * time.Millisecond)
	mustOK(t, s.Resize(40, 120))
	clk.advance(20 * time.Millisecond)
	mustOK(t, s.Close(3, Header{Name: "APTL_CLOSE_REASON", Value: "exit"}, Header{Name: "APTL_EMPTY", Value: ""}))

	wantTS := `Script started on 2026-11-30 16:18:11+00:00 [COMMAND="printf \"hi\\n\"; exit 3" TERM="xterm" TTY="/dev/pts/0" COLUMNS="80" LINES="24"]` + "\n" +
		"hi\r\nabc\nScript done on 2026-11-30 16:18:12+00:00 [COMMAND_EXIT_CODE=\"3\"]\n"
	wantTM := `H 0.000000 START_TIME 2026-11-30 16:18:11+00:00
H 0.000000 TERM xterm
H 0.000000 TTY /dev/pts/0
H 0.000000 COLUMNS 80
H 0.000000 LINES 24
H 0.000000 SHELL /bin/bash
H 0.000000 COMMAND printf "hi\\n"; exit 3
H 0.000000 TIMING_LOG timing
H 0.000000 OUTPUT_LOG typescript
H 0.000000 INPUT_LOG typescript
H 0.000000 APTL_RUN_ID r
O 0.010237 4
I 0.500000 3
S 1.100000 SIGWINCH ROWS=40 COLS=120
H 0.000000 DURATION 1.630237
H 0.000000 EXIT_CODE 3
H 0.000000 APTL_CLOSE_REASON exit
H 0.000000 APTL_EMPTY
`
	if got := readRecord(t, s.Dir(), "typescript"); got != wantTS {
		t.Errorf("typescript:\n got %q\nwant %q", got, wantTS)
	}
	if got := readRecord(t, s.Dir(), "timing"); got != wantTM {
		t.Errorf("timing:\n got %q\nwant %q", got, wantTM)
	}
}

func TestNoTerminalHeader(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 11, 30, 16, 18, 11, 0, time.UTC)}
	s, err := create(t.TempDir(), Meta{RunID: "r", SessionID: "s", Command: "id"}, testOptions(), clk.now)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	mustOK(t, s.Close(0))
	want := `Script started on 2026-11-30 16:18:11+00:00 [COMMAND="id" <not executed on terminal>]` + "\n"
	if first, _, _ := strings.Cut(readRecord(t, s.Dir(), "typescript"), "\n"); first+"\n" != want {
		t.Errorf("header = %q, want %q", first, want)
	}
	hs := timingHeaders(t, readRecord(t, s.Dir(), "timing"))
	for _, name := range []string{"TERM", "TTY", "COLUMNS", "LINES", "SHELL"} {
		if v, ok := headerValue(hs, name); ok {
			t.Errorf("H %s = %q present for a session without PTY or shell", name, v)
		}
	}
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readRecord(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "pty", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var timingLine = regexp.MustCompile(`^(?:[IO] \d+\.\d{6} \d+|S \d+\.\d{6} SIGWINCH ROWS=\d+ COLS=\d+|H \d+\.\d{6} ([A-Z0-9_]+)(?: (.*))?)$`)

// timingHeaders checks every timing line against the grammar scriptreplay
// parses and returns the H entries in file order.
func timingHeaders(t *testing.T, timing string) []Header {
	t.Helper()
	var hs []Header
	for i, line := range strings.Split(strings.TrimSuffix(timing, "\n"), "\n") {
		m := timingLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("timing line %d does not parse: %q", i+1, line)
		}
		if m[1] != "" {
			hs = append(hs, Header{Name: m[1], Value: m[2]})
		}
	}
	return hs
}

func headerValue(hs []Header, name string) (string, bool) {
	for _, h := range hs {
		if h.Name == name {
			return h.Value, true
		}
	}
	return "", false
}
