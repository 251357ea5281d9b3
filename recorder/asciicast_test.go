package recorder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
)

// castEvent is one parsed event line.
type castEvent struct {
	t    float64
	typ  string
	data string
}

// readCast parses an export: every line must be JSON in valid UTF-8, the
// first a v2 header, the rest [time, type, data] with times that never go
// back.
func readCast(t *testing.T, b []byte) (map[string]any, []castEvent) {
	t.Helper()
	if !utf8.Valid(b) {
		t.Fatal("export is not valid UTF-8")
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	var hdr map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &hdr); err != nil {
		t.Fatalf("header line %q: %v", lines[0], err)
	}
	var evs []castEvent
	last := 0.0
	for i, line := range lines[1:] {
		var raw []json.RawMessage
		if err := json.Unmarshal([]byte(line), &raw); err != nil || len(raw) != 3 {
			t.Fatalf("line %d %q: not a 3-element array (%v)", i+2, line, err)
		}
		var ev castEvent
		if json.Unmarshal(raw[0], &ev.t) != nil || json.Unmarshal(raw[1], &ev.typ) != nil || json.Unmarshal(raw[2], &ev.data) != nil {
			t.Fatalf("line %d %q: want [number, string, string]", i+2, line)
		}
		if ev.t < last {
			t.Errorf("line %d: time %v before %v", i+2, ev.t, last)
		}
		last = ev.t
		evs = append(evs, ev)
	}
	return hdr, evs
}

// joinEvents concatenates the data of the events of one type.
func joinEvents(evs []castEvent, typ string) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.typ == typ {
			b.WriteString(ev.data)
		}
	}
	return b.String()
}

func exportCast(t *testing.T, dir string, opts examine.CastOptions) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := examine.ExportAsciicast(dir, &b, opts); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// castSteps has ANSI escapes, characters split across two Output calls
// (with input between the halves of one), a resize, and characters JSON
// would escape for HTML.
var castSteps = []step{
	{stream: 'O', p: []byte("\x1b[1;32mkali@kali\x1b[0m:~$ ")},
	{stream: 'I', p: []byte("echo caf\xc3\xa9 <&>\r")},
	{stream: 'O', p: []byte("echo caf\xc3")},
	{stream: 'O', p: []byte("\xa9 <&>\r\nclean \xf0\x9f")},
	{stream: 'I', p: []byte("\x03")},
	{stream: 'O', p: []byte("\x98\x80 done\r\n")},
	{stream: 'S', rows: 40, cols: 120},
	{stream: 'O', p: []byte("\x1b[2J\x1b[H\xe2\x94\x80\xe2\x94\x80\r\n$ ")},
}

func TestAsciicastExport(t *testing.T) {
	m := Meta{RunID: "run-7", SessionID: "sess-3", Term: "xterm-256color", TTY: "/dev/pts/3", Rows: 24, Cols: 80,
		Headers: []Header{{Name: "APTL_RUN_ID", Value: "run-7"}, {Name: "APTL_SESSION_ID", Value: "sess-3"}}}
	start := time.Now()
	s := createSession(t, t.TempDir(), m, testOptions())
	in, out := play(t, s, castSteps)
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	cast := exportCast(t, s.Dir(), examine.CastOptions{Input: true})
	hdr, evs := readCast(t, cast)

	want := map[string]any{"version": 2.0, "width": 80.0, "height": 24.0,
		"env": map[string]any{"TERM": "xterm-256color"}, "title": "run-7/sess-3"}
	for k, v := range want {
		if got, _ := json.Marshal(hdr[k]); !bytes.Equal(got, must(json.Marshal(v))) {
			t.Errorf("header %s = %s, want %v", k, got, v)
		}
	}
	if ts, _ := hdr["timestamp"].(float64); ts < float64(start.Unix()-1) || ts > float64(time.Now().Unix()) {
		t.Errorf("header timestamp %v, want the start %d", hdr["timestamp"], start.Unix())
	}
	if got := joinEvents(evs, "o"); got != string(out) {
		t.Errorf("output events = %q, want %q", got, out)
	}
	if got := joinEvents(evs, "i"); got != string(in) {
		t.Errorf("input events = %q, want %q", got, in)
	}
	if got := joinEvents(evs, "r"); got != "120x40" {
		t.Errorf("resize events = %q, want 120x40", got)
	}
	for _, ev := range evs {
		if ev.typ != "o" && ev.typ != "i" && ev.typ != "r" {
			t.Errorf("event type %q", ev.typ)
		}
		if strings.ContainsRune(ev.data, utf8.RuneError) {
			t.Errorf("event %q has U+FFFD: a split character was not kept whole", ev.data)
		}
	}
	if !bytes.Contains(cast, []byte("<&>")) {
		t.Error("export escapes <&> for HTML; want them as they are")
	}
	t.Run("asciinema cat", func(t *testing.T) { checkAsciinemaCat(t, cast, out) })
	t.Run("input left out by default", func(t *testing.T) {
		shared := exportCast(t, s.Dir(), examine.CastOptions{})
		_, plain := readCast(t, shared)
		var withoutInput []castEvent
		for _, ev := range evs {
			if ev.typ != "i" {
				withoutInput = append(withoutInput, ev)
			}
		}
		if !slices.Equal(plain, withoutInput) {
			t.Errorf("default export = %v\nwant the --input export without its \"i\" events: %v", plain, withoutInput)
		}
	})
}

// TestAsciicastUnechoedInput: a password typed at a prompt that does not
// echo it (read -s, sudo) is in the typescript as evidence, and in no
// asciicast export unless --input asks for the input stream.
func TestAsciicastUnechoedInput(t *testing.T) {
	s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "s", Term: "xterm"}, testOptions())
	const secret = "hunter2-canary"
	play(t, s, []step{
		{stream: 'O', p: []byte("[sudo] password for kali: ")},
		{stream: 'I', p: []byte(secret + "\r")},
		{stream: 'O', p: []byte("\r\n$ ")},
	})
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	ts, err := os.ReadFile(filepath.Join(s.Dir(), "pty", "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(ts, []byte(secret)) {
		t.Fatal("the typescript does not hold the typed password; it is the evidence")
	}
	if cast := exportCast(t, s.Dir(), examine.CastOptions{}); bytes.Contains(cast, []byte(secret)) {
		t.Errorf("the default export holds the unechoed password: %q", cast)
	}
	_, evs := readCast(t, exportCast(t, s.Dir(), examine.CastOptions{Input: true}))
	if got := joinEvents(evs, "i"); got != secret+"\r" {
		t.Errorf("--input export: input events %q, want %q", got, secret+"\r")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestAsciicastInvalidUTF8: bytes that are not UTF-8 become U+FFFD, one per
// byte, including an incomplete character at the end of the session.
func TestAsciicastInvalidUTF8(t *testing.T) {
	s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "s", Command: "cat /bin/true"}, testOptions())
	play(t, s, []step{
		{stream: 'O', p: []byte("a\xffb\xc3")},
		{stream: 'O', p: []byte("(\xed\xa0\x80")}, // \xc3 then '(' is invalid; a surrogate is invalid
		{stream: 'O', p: []byte("\xf0\x9f")},      // stderr completes it: one stream in the cast
	})
	if err := s.Stderr([]byte("\x98\x80 err\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Output([]byte("\xe2\x82")); err != nil { // incomplete at the end
		t.Fatal(err)
	}
	if err := s.Close(1); err != nil {
		t.Fatal(err)
	}
	hdr, evs := readCast(t, exportCast(t, s.Dir(), examine.CastOptions{}))
	if hdr["width"] != 80.0 || hdr["height"] != 24.0 || hdr["env"] != nil || hdr["title"] != nil {
		t.Errorf("header %v, want 80x24 with no env or title for a session without a PTY", hdr)
	}
	const r = "\uFFFD"
	want := "a" + r + "b" + r + "(" + r + r + r + "\U0001F600 err\n" + r + r
	if got := joinEvents(evs, "o"); got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

// TestAsciicastLargeEntry: an entry larger than examine.CastChunk becomes several
// events at the same time, and characters across their boundary survive.
func TestAsciicastLargeEntry(t *testing.T) {
	s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "s", Term: "xterm"}, testOptions())
	big := []byte("x" + strings.Repeat("é", examine.CastChunk)) // a character straddles every chunk boundary
	_, out := play(t, s, []step{{stream: 'O', p: big}})
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	_, evs := readCast(t, exportCast(t, s.Dir(), examine.CastOptions{}))
	if len(evs) < 3 {
		t.Errorf("%d events for %d bytes, want it split into chunks of %d", len(evs), len(big), examine.CastChunk)
	}
	for _, ev := range evs[1:] {
		if ev.t != evs[0].t {
			t.Errorf("chunk at %v, the entry's time is %v", ev.t, evs[0].t)
		}
	}
	if got := joinEvents(evs, "o"); got != string(out) {
		t.Errorf("output differs: %d bytes, want %d", len(got), len(out))
	}
}

func TestAsciicastMalformedTiming(t *testing.T) {
	tests := []struct {
		name, line, want string
	}{
		{"unknown kind", "X 0.100000 3", "timing:NN: " + scriptfmt.ErrTimingLine.Error() + " (kind"},
		{"bad delay", "O soon 3", "(delay"},
		{"negative delay", "O -1.000000 3", "(delay"},
		{"negative count", "O 0.100000 -1", "(byte count)"},
		{"extra field", "I 0.100000 1 2", "(byte count)"},
		{"bad size", "S 0.100000 SIGWINCH ROWS=x COLS=1", "(window size"},
		{"past the typescript", "O 0.100000 999999", "bytes after the header line, the timing accounts for"},
		{"line too long", "H 0.000000 X " + strings.Repeat("v", scriptfmt.MaxLine), "timing:NN: " + scriptfmt.ErrTimingLine.Error() + ": line longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "s"}, testOptions())
			play(t, s, []step{{stream: 'O', p: []byte("hello\n")}})
			if err := s.Close(0); err != nil {
				t.Fatal(err)
			}
			tm := filepath.Join(s.Dir(), "pty", "timing")
			b, err := os.ReadFile(tm)
			if err != nil {
				t.Fatal(err)
			}
			lineNo := bytes.Count(b, []byte("\n")) + 1
			if err := os.WriteFile(tm, append(b, tt.line+"\n"...), 0o600); err != nil {
				t.Fatal(err)
			}
			leaves(s, evidence.StatusTampered) // a line appended after the close
			var w bytes.Buffer
			err = examine.ExportAsciicast(s.Dir(), &w, examine.CastOptions{Input: true})
			want := strings.ReplaceAll(tt.want, "NN", strconv.Itoa(lineNo))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want it to contain %q", err, want)
			}
			if !strings.Contains(err.Error(), s.Dir()) {
				t.Errorf("err = %v, want it to name the file", err)
			}
			if w.Len() != 0 {
				t.Errorf("wrote %d bytes before failing; a malformed timing file must fail first", w.Len())
			}
		})
	}
}

// checkAsciinemaCat runs Debian's asciinema on the export and checks that
// `asciinema cat` prints exactly the recorded output. asciinema cat opens
// /dev/tty, so it runs on a PTY of its own; stdout stays a pipe.
func checkAsciinemaCat(t *testing.T, cast, out []byte) {
	bin, err := exec.LookPath("asciinema")
	if err != nil {
		t.Skip("asciinema not on PATH: install the Debian package asciinema to run the `asciinema cat` acceptance check")
	}
	home := t.TempDir()
	file := filepath.Join(home, "session.cast")
	if err := os.WriteFile(file, cast, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "cat", file)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"LC_ALL=C.UTF-8", "PYTHONIOENCODING=utf-8", "TERM=xterm"}
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ptmx, err := pty.Start(cmd)
	if err != nil {
		t.Fatalf("start asciinema on a pty: %v", err)
	}
	defer ptmx.Close()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		io.Copy(io.Discard, bufio.NewReader(ptmx)) // ends with EIO once asciinema exits
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("asciinema cat: %v; stderr: %q", err, stderr.String())
	}
	<-drained
	if !bytes.Equal(stdout.Bytes(), out) {
		t.Errorf("asciinema cat printed %q, want the recorded output %q", stdout.Bytes(), out)
	}
}
