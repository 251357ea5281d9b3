package tests

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	rt "github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// The web player's acceptance test with real tools: sessions recorded with
// the real recorder, exported with `export --format html`, played to the end
// by headless Chromium with no network from a file:// URL, and the
// terminal's screen, read from the page's DOM, compared with the screen
// scriptreplay leaves in tmux from the same typescript and timing.

// browserTools returns the paths of chromium, tmux and scriptreplay, or
// skips naming the Debian package that is missing.
func browserTools(t *testing.T) (chromium, tmux, scriptreplay string) {
	t.Helper()
	find := func(prog, pkg string) string {
		path, err := exec.LookPath(prog)
		if err != nil {
			skipClient(t, prog, fmt.Sprintf("%s not installed (Debian package %s): the web player's browser test needs it", prog, pkg))
		}
		return path
	}
	return find("chromium", "chromium"), find("tmux", "tmux"), find("scriptreplay", "bsdutils")
}

// webPlayerSessions are the three sessions of the acceptance test.
func webPlayerSessions() []rt.Terminal {
	wide := strings.Repeat("w", 90) // one row at 100 columns, two at 80
	return []rt.Terminal{
		{ID: "plain", User: "kali", Rows: 24, Cols: 80, Steps: rt.Steps(
			rt.Out("kali@lab:~$ "), rt.In("ls\r"), rt.Out("ls\r\n"), rt.Out("notes.txt  report.pdf\r\n"),
			// Markup in the output is text on the terminal, as in tmux.
			rt.Out("kali@lab:~$ "), rt.In("cat x.html\r"), rt.Out("cat x.html\r\n<img src=x onerror=alert(1)> &amp; </script>\r\n"),
			rt.Out("kali@lab:~$ "), rt.In("printf '\\033[1;32mgreen\\033[0m\\n'\r"),
			rt.Out("printf '\\033[1;32mgreen\\033[0m\\n'\r\n\x1b[1;32mgreen\x1b[0m\r\nkali@lab:~$ "))},
		{ID: "resized", User: "kali", Rows: 24, Cols: 80, Steps: append(rt.Steps(
			rt.Out("kali@lab:~$ "), rt.In("stty size\r"), rt.Out("stty size\r\n24 80\r\nkali@lab:~$ ")),
			rt.Resize(30, 100),
			rt.Step{Chunk: rt.Out("stty size\r\n30 100\r\n" + wide + "\r\nkali@lab:~$ ")})},
		// Output past the store limit: a gap record, marked on the seek bar;
		// neither the typescript nor the page has those bytes.
		{ID: "gapped", User: "kali", Rows: 24, Cols: 80, MaxBytes: 40, Steps: rt.Steps(
			rt.Out("kali@lab:~$ "), rt.In("yes | head -c 100\r"), rt.Out("yes | head -c 100\r\n"), rt.Out(strings.Repeat("y\r\n", 50)))},
		{ID: "utf8-split", User: "kali", Rows: 24, Cols: 80, Steps: rt.Steps(
			rt.Out("kali@lab:~$ "), rt.In("echo caf\xc3\xa9 \xe2\x82\xac\r"),
			// é split after its first byte, € after its second: each
			// character's bytes reach the typescript in two timing entries.
			rt.Out("echo caf\xc3"), rt.Out("\xa9 \xe2\x82"), rt.Out("\xac\r\ncaf\xc3\xa9 \xe2\x82\xac\r\nkali@lab:~$ "))},
	}
}

func TestWebPlayerInChromiumMatchesScriptreplay(t *testing.T) {
	chromium, tmux, scriptreplay := browserTools(t)
	if testing.Short() {
		t.Skip("builds the command and runs a browser; skipped in -short mode")
	}
	bin := buildCommand(t)
	keyFile := filepath.Join(t.TempDir(), "host.pub")
	writeFile(t, keyFile, gossh.MarshalAuthorizedKey(rt.Signer().PublicKey()))
	artifacts := os.Getenv("APTL_TEST_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	root := t.TempDir()
	for _, term := range webPlayerSessions() {
		t.Run(term.ID, func(t *testing.T) {
			dir := rt.RecordTerminal(t, root, term)
			page := filepath.Join(t.TempDir(), term.ID+".html")
			if out, code := runCommand(t, bin, "export", "--format", "html", "--key", keyFile, "--out", page, dir); code != 0 {
				t.Fatalf("export --format html: exit %d: %s", code, out)
			}
			cols, rows := finalSize(term)
			want := tmuxScreen(t, tmux, scriptreplay, dir, cols, rows)
			start := time.Now()
			dom := chromiumRun(t, chromium, pageURL(page, playToEnd), "--dump-dom")
			t.Logf("chromium loaded and played %s in %v", filepath.Base(page), time.Since(start).Round(time.Millisecond))
			if !bytes.Contains(dom, []byte(`data-player-state="ended"`)) {
				t.Fatalf("the page did not play to the end; its state: %s", regexp.MustCompile(`data-player-state="[^"]*"`).Find(dom))
			}
			if size := fmt.Sprintf(`data-terminal-size="%dx%d"`, cols, rows); !bytes.Contains(dom, []byte(size)) {
				t.Errorf("the terminal did not end at %dx%d: %s", cols, rows, regexp.MustCompile(`data-terminal-size="[^"]*"`).Find(dom))
			}
			if !bytes.Contains(dom, []byte("Verified with the given key: ok")) {
				t.Errorf("the banner lacks the verifier's ok verdict")
			}
			got := trimScreen(screenDump(t, dom))
			if got != want {
				t.Errorf("the page's screen differs from scriptreplay's in tmux\npage:\n%s\ntmux:\n%s", got, want)
			}
			if bytes.Contains(dom, []byte("<img")) {
				t.Error("markup in the output became an element of the page")
			}
			for _, mark := range marksWanted(term) {
				if !bytes.Contains(dom, []byte(`class="mark `+mark+`"`)) {
					t.Errorf("the seek bar has no %s mark", mark)
				}
			}
			if term.ID == "plain" {
				checkFindOpensAtMoment(t, chromium, page)
			}
			if term.ID == "resized" {
				shot := filepath.Join(artifacts, "webplayer-"+term.ID+".png")
				chromiumRun(t, chromium, pageURL(page, playToEnd), "--window-size=1200,1400", "--screenshot="+shot)
				if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
					t.Errorf("no screenshot at %s: %v", shot, err)
				}
				t.Logf("screenshot of the played page: %s (kept when APTL_TEST_ARTIFACTS names a folder)", shot)
			}
		})
	}
}

// checkFindOpensAtMoment: ?find=TEXT opens the page at the moment the
// text appeared, the screen as it was then: the listing shown, the
// commands after it not yet.
func checkFindOpensAtMoment(t *testing.T, chromium, page string) {
	t.Helper()
	dom := chromiumRun(t, chromium, pageURL(page, "?find=report.pdf&dumpscreen=1"), "--dump-dom")
	screen := screenDump(t, dom)
	if !strings.Contains(screen, "notes.txt  report.pdf") || strings.Contains(screen, "cat x.html") || !bytes.Contains(dom, []byte("appeared at ")) {
		t.Errorf("?find=report.pdf: the screen is not the one when the listing appeared:\n%s", screen)
	}
}

// marksWanted are the seek bar marks a session must have.
func marksWanted(term rt.Terminal) (marks []string) {
	if term.MaxBytes > 0 {
		marks = append(marks, "gap")
	}
	if cols, rows := finalSize(term); cols != term.Cols || rows != term.Rows {
		marks = append(marks, "resize")
	}
	return marks
}

// finalSize is the window a session ends with.
func finalSize(term rt.Terminal) (cols, rows int) {
	cols, rows = term.Cols, term.Rows
	for _, st := range term.Steps {
		if st.Stream == "" {
			cols, rows = st.Cols, st.Rows
		}
	}
	return cols, rows
}

// tmuxScreen plays the session with scriptreplay in a detached tmux of
// cols × rows on a server of its own and returns the screen it leaves.
// scriptreplay follows no window change, so the pane has the session's
// last size from the start.
func tmuxScreen(t *testing.T, tmux, scriptreplay, dir string, cols, rows int) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "tmux.sock")
	channel := "replayed"
	replay := fmt.Sprintf("%s -T %s -B %s -m 0.001; %s -S %s wait-for -S %s; sleep 30",
		scriptreplay, filepath.Join(dir, "pty", "timing"), filepath.Join(dir, "pty", "typescript"), tmux, socket, channel)
	run := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, tmux, append([]string{"-S", socket}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return out
	}
	run("-f", "/dev/null", "new-session", "-d", "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows), replay)
	t.Cleanup(func() { _ = exec.Command(tmux, "-S", socket, "kill-server").Run() })
	run("wait-for", channel)
	return trimScreen(string(run("capture-pane", "-p")))
}

// chromiumRun runs headless Chromium on the page with no network: in a
// network namespace of its own when root can make one, else with every
// host name unresolvable and a proxy that is nothing.
func chromiumRun(t *testing.T, chromium, url string, extra ...string) []byte {
	t.Helper()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
		"--virtual-time-budget=20000"}, extra...)
	args = append(args, url)
	name := chromium
	if unshare, err := exec.LookPath("unshare"); err == nil && os.Geteuid() == 0 {
		name, args = unshare, append([]string{"-n", chromium}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, lastLines(stderr.String(), 20))
	}
	return out
}

// playToEnd is the query that plays a page to its end at once and has it
// write its screen into the DOM.
const playToEnd = "?speed=1000&autoplay=1&dumpscreen=1"

func pageURL(page, query string) string { return "file://" + page + query }

// screenDump is the terminal's text the page wrote into its screen-dump
// element (?dumpscreen=1) from the terminal's rows once played.
func screenDump(t *testing.T, dom []byte) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<pre id="screen-dump"[^>]*>(.*?)</pre>`).FindSubmatch(dom)
	if m == nil {
		t.Fatal("the page's DOM has no screen-dump element")
	}
	return html.UnescapeString(string(m[1]))
}

// trimScreen drops trailing blanks of each line and trailing empty lines.
func trimScreen(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// TestWebPlayerLargePageLoad measures what a 10 MiB typescript costs the
// browser: the page's size, the time from the command's start to the
// player ready (the page read, both files decoded, the timing parsed), and
// to the end of a play at 1000 times real time. It fails only when the
// page does not get there; the figures are the log's (docs/EXAMINER.md).
func TestWebPlayerLargePageLoad(t *testing.T) {
	chromium, _, _ := browserTools(t)
	if !slowTests {
		t.Skip("records and plays a 10 MiB session; set APTL_CAPTURE_SLOW_TESTS=1 to run it")
	}
	bin := buildCommand(t)
	dir := rt.RecordLarge(t, t.TempDir(), 10<<20)
	page := filepath.Join(t.TempDir(), "large.html")
	if out, code := runCommand(t, bin, "export", "--format", "html", "--out", page, dir); code != 0 {
		t.Fatalf("export --format html: exit %d: %s", code, out)
	}
	st, err := os.Stat(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ query, state string }{
		{"?", "ready"},
		{"?speed=1000&autoplay=1", "ended"},
	} {
		start := time.Now()
		dom := chromiumRun(t, chromium, pageURL(page, c.query), "--dump-dom")
		took := time.Since(start).Round(time.Millisecond)
		if !bytes.Contains(dom, []byte(`data-player-state="`+c.state+`"`)) {
			t.Errorf("%s: the page did not get to %q; its state: %s", c.query, c.state, regexp.MustCompile(`data-player-state="[^"]*"`).Find(dom))
		}
		t.Logf("10 MiB typescript, page of %.1f MiB: chromium to %q (%s) in %v", float64(st.Size())/(1<<20), c.state, c.query, took)
	}
}
