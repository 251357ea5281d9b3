package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	rt "github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// TestExportHTMLRunDir: `export --format html --run-dir` writes a page per
// session and an index linking them, with the verifier's verdicts; it
// replaces no file, and its flags are refused where they mean nothing.
func TestExportHTMLRunDir(t *testing.T) {
	bin := buildCommand(t)
	root := t.TempDir()
	for _, id := range []string{"s-one", "s-two"} {
		rt.RecordTerminal(t, root, rt.Terminal{ID: id, User: "kali", Rows: 24, Cols: 80, Steps: rt.Steps(rt.Out("$ "), rt.In("id\r"), rt.Out("id\r\nuid=1000(kali)\r\n$ "))})
	}
	runDir := filepath.Join(root, rt.RunID)
	keyFile := filepath.Join(t.TempDir(), "host.pub")
	writeFile(t, keyFile, gossh.MarshalAuthorizedKey(rt.Signer().PublicKey()))
	out := filepath.Join(t.TempDir(), "pages")
	if msg, code := runCommand(t, bin, "export", "--format", "html", "--key", keyFile, "--run-dir", runDir, "--out", out); code != 0 {
		t.Fatalf("export --run-dir: exit %d: %s", code, msg)
	}
	index, err := os.ReadFile(filepath.Join(out, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s-one", "s-two"} {
		if !strings.Contains(string(index), `<a href="`+id+`.html">`+id+`</a>`) {
			t.Errorf("index.html does not link %s.html", id)
		}
		page, err := os.ReadFile(filepath.Join(out, id+".html"))
		if err != nil || !strings.Contains(string(page), "Verified with the given key: ok") {
			t.Errorf("%s.html: %v, or no ok verdict in its banner", id, err)
		}
	}
	if strings.Count(string(index), "<td>ok</td>") != 2 {
		t.Errorf("index.html does not give both sessions' ok verdict:\n%s", index)
	}
	if msg, code := runCommand(t, bin, "export", "--format", "html", "--run-dir", runDir, "--out", out); code != 1 || !strings.Contains(string(msg), "exists") {
		t.Errorf("a second export into the same folder: exit %d (%s); want 1, refusing to replace the pages", code, msg)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "html", "--run-dir", runDir}, "--out"},
		{[]string{"--format", "asciicast", "--key", keyFile, filepath.Join(runDir, "s-one")}, "--key"},
		{[]string{"--format", "asciicast", "--run-dir", runDir}, "--run-dir"},
		{[]string{"--format", "html", "--run-dir", runDir, "--out", out, filepath.Join(runDir, "s-one")}, "not both"},
		{[]string{"--format", "svg", filepath.Join(runDir, "s-one")}, "want asciicast, html or head"},
	} {
		if msg, code := runCommand(t, bin, append([]string{"export"}, c.args...)...); code != 2 || !strings.Contains(string(msg), c.want) {
			t.Errorf("export %v: exit %d (%s); want 2, naming %s", c.args, code, msg, c.want)
		}
	}
}

// TestExportHTMLLeavesNoFileOnFailure: a session named "index" gets a page
// that is not the run's index, and a page that fails part-way (a timing
// line the recorder does not write) leaves no file behind to be taken for
// the session or to refuse the next try.
func TestExportHTMLLeavesNoFileOnFailure(t *testing.T) {
	bin := buildCommand(t)
	root := t.TempDir()
	for _, id := range []string{"index", "s-bad"} {
		rt.RecordTerminal(t, root, rt.Terminal{ID: id, User: "kali", Rows: 24, Cols: 80, Steps: rt.Steps(rt.Out("$ "))})
	}
	runDir := filepath.Join(root, rt.RunID)
	timing := filepath.Join(runDir, "s-bad", "pty", "timing")
	f, err := os.OpenFile(timing, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("X not a timing line\n")
	f.Close()

	out := filepath.Join(t.TempDir(), "pages")
	if msg, code := runCommand(t, bin, "export", "--format", "html", "--run-dir", runDir, "--out", out); code != 1 || !strings.Contains(string(msg), "1 of 2 sessions have no page") {
		t.Fatalf("export --run-dir with one bad session: exit %d: %s; want 1, naming the one", code, msg)
	}
	index, err := os.ReadFile(filepath.Join(out, "index.html"))
	if err != nil || !strings.Contains(string(index), `<a href="index@session.html">index</a>`) {
		t.Errorf("index.html: %v; want it to link the session named index as index@session.html:\n%s", err, index)
	}
	if _, err := os.Stat(filepath.Join(out, "s-bad.html")); !os.IsNotExist(err) {
		t.Errorf("the failed page s-bad.html is left behind: %v", err)
	}
	page := filepath.Join(t.TempDir(), "bad.html")
	if msg, code := runCommand(t, bin, "export", "--format", "html", "--out", page, filepath.Join(runDir, "s-bad")); code != 1 {
		t.Errorf("export of the bad session: exit %d: %s; want 1", code, msg)
	}
	if _, err := os.Stat(page); !os.IsNotExist(err) {
		t.Errorf("a failed export left %s behind: %v", page, err)
	}
}
