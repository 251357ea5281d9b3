package webplayer

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	rt "github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// hostile is a string that would run script, load a URL or end the script
// element if any of it reached the page unescaped.
const hostile = `</script><script>alert(1)</script><img src=x onerror=alert(2)>"'&`

// session records a short PTY session: a password typed unechoed among
// ordinary input, output that holds hostile, and a window change.
func session(t testing.TB, user string) string {
	t.Helper()
	return rt.RecordTerminal(t, t.TempDir(), rt.Terminal{ID: "s1", User: user, Rows: 24, Cols: 80, Steps: append(rt.Steps(
		rt.Out("[sudo] password for kali: "), rt.In("hunter2-secret\r"), rt.Out("\r\n$ "), rt.In("cat x\r"),
		rt.Out("cat x\r\n"+hostile+"\r\n$ ")), rt.Resize(30, 100))})
}

func pageOf(t *testing.T, dir string, opts Options) string {
	t.Helper()
	var b bytes.Buffer
	if _, err := WritePage(&b, dir, opts); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// embedded decodes the base64 the page assigns to the script variable name.
func embedded(t *testing.T, p, name string) []byte {
	t.Helper()
	m := regexp.MustCompile(`window\.` + name + ` = "([A-Za-z0-9+/=]*)";`).FindStringSubmatch(p)
	if m == nil {
		t.Fatalf("the page assigns no base64 string to %s", name)
	}
	b, err := base64.StdEncoding.DecodeString(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readPTY(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, vocab.PTYDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHostileRecordStaysText: metadata from the log reaches the page
// escaped, and transcript bytes only as base64: the page has exactly its
// own three script elements and no element or attribute of the record's.
func TestHostileRecordStaysText(t *testing.T) {
	dir := session(t, hostile)
	p := pageOf(t, dir, Options{Input: true})
	if strings.Contains(p, hostile) || strings.Contains(p, "<img") || strings.Contains(p, "<script>alert") {
		t.Error("the record's hostile string reached the page unescaped")
	}
	if n := strings.Count(strings.ToLower(p), "<script"); n != 3 {
		t.Errorf("%d script elements, want the page's own 3", n)
	}
	if n := strings.Count(strings.ToLower(p), "</script"); n != 3 {
		t.Errorf("%d script end tags, want the page's own 3", n)
	}
	if !strings.Contains(p, "&lt;/script&gt;&lt;script&gt;alert(1)") {
		t.Error("the user name is not shown, escaped, in the banner")
	}
}

// TestNoNetworkReference: nothing in the page names a URL, loads a
// resource or may connect anywhere, and its policy forbids it anyway.
func TestNoNetworkReference(t *testing.T) {
	p := pageOf(t, session(t, "kali"), Options{})
	if m := regexp.MustCompile(`(?i)[a-z][a-z0-9+.-]*://|url\(|@import`).FindString(p); m != "" {
		t.Errorf("the page holds %q, a reference to something outside it", m)
	}
	// Outside the scripts (where term.js has a variable named src), no
	// element has an attribute that loads anything.
	markup := regexp.MustCompile(`(?s)<script>.*?</script>`).ReplaceAllString(p, "")
	if m := regexp.MustCompile(`(?i)\s(src|href|action|formaction|srcset|poster|data)\s*=`).FindString(markup); m != "" {
		t.Errorf("an element of the page has %q", m)
	}
	csp := contentSecurityPolicy(t, p)
	if !strings.HasPrefix(csp, "default-src 'none';") || strings.Contains(csp, "unsafe-inline' ;") || strings.Contains(csp, "script-src 'unsafe") {
		t.Errorf("the page's content security policy %q does not refuse every load, or lets any inline script run", csp)
	}
	// Each of the page's scripts is allowed by its hash, and nothing else.
	var want []string
	for _, m := range regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindAllStringSubmatch(p, -1) {
		sum := sha256.Sum256([]byte(m[1]))
		want = append(want, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
	if _, got, _ := strings.Cut(csp, "script-src "); len(want) != 3 || got != strings.Join(want, " ") {
		t.Errorf("script-src %q; want the hashes of the page's 3 scripts, %q", got, want)
	}
	if strings.Contains(string(termJS), "://") || strings.Contains(strings.ToLower(string(termJS)), "</script") {
		t.Error("the embedded term.js names a URL or ends a script element")
	}
}

// contentSecurityPolicy is the page's policy, its attribute unescaped.
func contentSecurityPolicy(t *testing.T, p string) string {
	t.Helper()
	m := regexp.MustCompile(`<meta http-equiv="Content-Security-Policy" content="([^"]*)">`).FindStringSubmatch(p)
	if m == nil {
		t.Fatal("the page has no content security policy")
	}
	return html.UnescapeString(m[1])
}

// TestFilesAsTheyAre: the timing file is embedded byte for byte, and so is
// the typescript with --input; without it, exactly the input's bytes are
// zero in the page's copy, so the typed password is not in the page.
func TestFilesAsTheyAre(t *testing.T) {
	dir := session(t, "kali")
	ts, tm := readPTY(t, dir, vocab.TypescriptFile), readPTY(t, dir, vocab.TimingFile)
	with := pageOf(t, dir, Options{Input: true})
	if !bytes.Equal(embedded(t, with, "APTL_TIMING_B64"), tm) {
		t.Error("the embedded timing differs from the file")
	}
	if !bytes.Equal(embedded(t, with, "APTL_TYPESCRIPT_B64"), ts) {
		t.Error("with Input, the embedded typescript differs from the file")
	}
	if !strings.Contains(with, `id="input-pane"`) {
		t.Error("with Input, the page has no input pane")
	}
	without := pageOf(t, dir, Options{})
	got := embedded(t, without, "APTL_TYPESCRIPT_B64")
	// "cat x\r" is echoed output too: it stays.
	if len(got) != len(ts) || bytes.Contains(got, []byte("hunter2")) || !bytes.Contains(got, []byte("cat x\r")) {
		t.Errorf("without Input: %d bytes (file %d), password present %v", len(got), len(ts), bytes.Contains(got, []byte("hunter2")))
	}
	var differ, zeros int
	for i := range ts {
		if got[i] != ts[i] {
			differ++
			if got[i] == 0 {
				zeros++
			}
		}
	}
	if want := len("hunter2-secret\r") + len("cat x\r"); differ != want || zeros != want {
		t.Errorf("without Input, %d bytes differ from the file (%d of them zero); want the %d input bytes, zeroed", differ, zeros, want)
	}
	if strings.Contains(without, `id="input-pane"`) || !strings.Contains(without, "21 bytes are zero bytes") {
		t.Error("without Input, the page shows an input pane or does not say the input is left out")
	}
}

// TestBounds: a typescript or timing past its bound is refused naming the
// file and the bound, before anything is written; a long metadata value
// is cut.
func TestBounds(t *testing.T) {
	for _, c := range []struct {
		file  string
		limit int64
	}{{vocab.TypescriptFile, MaxTypescriptBytes}, {vocab.TimingFile, MaxTimingBytes}} {
		dir := session(t, "kali")
		if err := os.Truncate(filepath.Join(dir, vocab.PTYDir, c.file), c.limit+1); err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, err := WritePage(&b, dir, Options{})
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "pty/"+c.file) || b.Len() != 0 {
			t.Errorf("%s one byte past its bound: %v, %d bytes written; want ErrTooLarge naming the file, nothing written", c.file, err, b.Len())
		}
	}
	long := strings.Repeat("é", 3000) // 6000 bytes, each character 2
	p := pageOf(t, session(t, long), Options{})
	if strings.Contains(p, long[:maxShownValue+2]) || !strings.Contains(p, long[:maxShownValue]+"…") {
		t.Error("a long user name is not cut at maxShownValue on a character boundary")
	}
}

// TestBadTimingRefused: a timing line the parser refuses stops the page,
// the error naming the file and line.
func TestBadTimingRefused(t *testing.T) {
	dir := session(t, "kali")
	path := filepath.Join(dir, vocab.PTYDir, vocab.TimingFile)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("O 1e3 5\n")
	f.Close()
	lines := bytes.Count(readPTY(t, dir, vocab.TimingFile), []byte("\n"))
	_, err = WritePage(io.Discard, dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "pty/timing:"+strconv.Itoa(lines)) {
		t.Errorf("a bad last timing line: %v; want an error naming pty/timing:%d", err, lines)
	}
	// Bytes the typescript does not hold.
	dir = session(t, "kali")
	if err := os.Truncate(filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := WritePage(io.Discard, dir, Options{}); err == nil || !strings.Contains(err.Error(), "past the typescript's end") {
		t.Errorf("a typescript cut short: %v", err)
	}
}

// TestVerdictInBanner: with keys the banner carries the verifier's
// status, a tampered typescript's too; without, it says not verified.
func TestVerdictInBanner(t *testing.T) {
	dir := session(t, "kali")
	keys := evidence.Keys{Trusted: rt.Trusted()}
	if p := pageOf(t, dir, Options{Keys: &keys}); !strings.Contains(p, "Verified with the given key: ok (every check passed)") {
		t.Error("a good session's banner lacks the ok verdict")
	}
	if p := pageOf(t, dir, Options{}); !strings.Contains(p, "Not verified") || strings.Contains(p, "Verified with") {
		t.Error("without keys, the banner does not say plainly that nothing was verified")
	}
	ts := readPTY(t, dir, vocab.TypescriptFile)
	i := bytes.Index(ts, []byte("$ "))
	ts[i] = '#'
	if err := os.WriteFile(filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile), ts, 0o600); err != nil {
		t.Fatal(err)
	}
	info, err := WritePage(io.Discard, dir, Options{Keys: &keys})
	if err != nil || info.Verdict != string(evidence.StatusTampered) {
		t.Errorf("an edited typescript: verdict %q, %v; want tampered", info.Verdict, err)
	}
}

// TestTimelineBounded: a session longer than MaxTimelineBars seconds is
// drawn in columns of several seconds, every byte counted in one.
func TestTimelineBounded(t *testing.T) {
	rec := &recordScan{duration: 10*time.Hour - time.Second} // 36000 whole seconds, the last one begun
	for s := 0; s < 36000; s += 7 {
		rec.entries = append(rec.entries, timedEntry{at: time.Duration(s) * time.Second, n: 3}, timedEntry{at: time.Duration(s) * time.Second, input: true, n: 1})
	}
	tl := rec.timeline()
	if tl.Columns > MaxTimelineBars || tl.BucketSecs != 20 {
		t.Errorf("%d columns of %d s for 10 h; want at most %d, of 20 s", tl.Columns, tl.BucketSecs, MaxTimelineBars)
	}
	if tl.MaxOut != 9 || tl.MaxIn != 3 { // 20 s holds 2 or 3 of the 7 s steps
		t.Errorf("largest column %d out, %d in; want 9 and 3", tl.MaxOut, tl.MaxIn)
	}
	for _, b := range tl.Bars {
		if b.OutH > timelineHeight/2 || b.InH > timelineHeight/2 || b.OutH < 1 || b.InH < 1 {
			t.Fatalf("bar %+v outside its half of the chart", b)
		}
	}
}

// TestSplitCharacterKeptAsBytes: a character split across two timing
// entries stays two entries of raw bytes in the page: the page's script
// (a streaming TextDecoder, tests/webplayer_browser_test.go shows it in a
// browser) decodes it whole, nothing in Go re-encodes it.
func TestSplitCharacterKeptAsBytes(t *testing.T) {
	dir := rt.RecordTerminal(t, t.TempDir(), rt.Terminal{ID: "s", Rows: 24, Cols: 80, Steps: rt.Steps(rt.Out("caf\xc3"), rt.Out("\xa9\r\n"))})
	p := pageOf(t, dir, Options{})
	if !bytes.Contains(embedded(t, p, "APTL_TYPESCRIPT_B64"), []byte("caf\xc3\xa9\r\n")) {
		t.Error("the split character's bytes are not in the page's typescript as recorded")
	}
	if !bytes.Contains(embedded(t, p, "APTL_TIMING_B64"), []byte(" 4\nO ")) {
		t.Error("the timing no longer has the character's first entry of 4 bytes")
	}
	if !strings.Contains(string(playerJS), "{ stream: true }") {
		t.Error("the player decodes entries without a streaming decoder")
	}
}

// TestVendoredTermJSIsDebians: the embedded term.js is Debian's
// libjs-term.js byte for byte, where that package is installed.
func TestVendoredTermJSIsDebians(t *testing.T) {
	const debian = "/usr/share/javascript/term.js/term.min.js"
	b, err := os.ReadFile(debian)
	if err != nil {
		t.Skipf("%s: %v (Debian package libjs-term.js)", debian, err)
	}
	if string(b) != string(termJS) {
		t.Errorf("term.min.js differs from %s: a changed copy must say so in LICENSE.term.js and docs/EXAMINER.md", debian)
	}
}

// BenchmarkWritePage10MiB: a page of a 10 MiB typescript, verified.
func BenchmarkWritePage10MiB(b *testing.B) {
	dir := rt.RecordLarge(b, b.TempDir(), 10<<20)
	keys := evidence.Keys{Trusted: rt.Trusted()}
	var size int
	for b.Loop() {
		var cw countingWriter
		if _, err := WritePage(&cw, dir, Options{Keys: &keys}); err != nil {
			b.Fatal(err)
		}
		size = int(cw)
	}
	b.ReportMetric(float64(size)/(1<<20), "page-MiB")
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

// TestGapRecordsMarked: the log's gap records (output past the store
// limit here) are listed and handed to the seek bar, placed by the log's
// clock.
func TestGapRecordsMarked(t *testing.T) {
	dir := rt.RecordTerminal(t, t.TempDir(), rt.Terminal{ID: "s", Rows: 24, Cols: 80, MaxBytes: 10,
		Steps: rt.Steps(rt.Out("stored\r\n"), rt.Out("past the limit, not stored\r\n"))})
	p := pageOf(t, dir, Options{})
	if !strings.Contains(p, `<ul id="gaps"><li>record `) || !strings.Contains(p, vocab.GapSizeLimit+", stream "+vocab.StreamOut+", 26 bytes") {
		t.Error("the page does not list the size-limit gap record")
	}
	m := regexp.MustCompile(`window\.APTL_PLAYER = (\{.*?\});\n`).FindStringSubmatch(p)
	if m == nil {
		t.Fatal("no player data in the page")
	}
	var d playerData
	if err := json.Unmarshal([]byte(m[1]), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Gaps) == 0 || !strings.Contains(d.Gaps[0].Label, vocab.GapSizeLimit) || d.Gaps[0].T < 0 || d.Gaps[0].T > 60 {
		t.Errorf("the seek bar's gaps %+v; want the size-limit gap, at its time since the open record", d.Gaps)
	}
}
