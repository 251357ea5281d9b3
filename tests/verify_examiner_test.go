package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// verifyDoc is verify --json's document (docs/RECORD.md, "verify --json").
type verifyDoc struct {
	OK  bool `json:"ok"`
	Run *struct {
		Layout    string             `json:"layout"`
		RunID     string             `json:"run_id"`
		Anomalies []evidence.Anomaly `json:"anomalies"`
	} `json:"run"`
	Sessions []evidence.Report `json:"sessions"`
}

// runVerifyIn runs the binary in dir with a deadline; it returns stdout,
// stderr and the exit code.
func runVerifyIn(t *testing.T, dir, bin string, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errOut bytes.Buffer
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("verify %v did not finish within the deadline", args)
	}
	return out.Bytes(), errOut.Bytes(), exitCodeOf(err)
}

func verifyJSON(t *testing.T, dir, bin string, args ...string) (verifyDoc, int) {
	t.Helper()
	out, errOut, code := runVerifyIn(t, dir, bin, append([]string{"verify", "--json"}, args...)...)
	var doc verifyDoc
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("verify --json %v: %v\n%s\n%s", args, err, out, errOut)
	}
	return doc, code
}

// verifyFixture builds the binary and makes a signer, its .pub file and a
// capture root for a verify test.
func verifyFixture(t *testing.T) (bin string, signer gossh.Signer, pub, root string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary; skipped in -short mode")
	}
	signer = newTestSigner(t)
	return buildCommand(t), signer, writePubKey(t, signer.PublicKey()), t.TempDir()
}

// TestVerifyPlacement: a session verifies by a relative path from its run
// folder, as "." from inside it, and as a copy in a folder of another
// name (what docker cp <container>:<root>/<run>/<session>/. <dest>
// leaves); the ids are the record's, and the renamed folder is a note.
func TestVerifyPlacement(t *testing.T) {
	bin, signer, pub, root := verifyFixture(t)
	dir := recordFinalized(t, root, "run-p", "live-1", signer)

	for _, c := range []struct{ cwd, arg string }{
		{filepath.Join(root, "run-p"), "live-1"},
		{dir, "."},
		{filepath.Join(dir, "pty"), ".."},
	} {
		out, errOut, code := runVerifyIn(t, c.cwd, bin, "verify", "--key", pub, c.arg)
		if code != 0 || !bytes.HasPrefix(out, []byte("OK")) || bytes.Contains(out, []byte("note")) {
			t.Errorf("verify %s from %s: exit %d\n%s%s", c.arg, c.cwd, code, out, errOut)
		}
	}

	dest := filepath.Join(t.TempDir(), "evidence-copy")
	if out, err := exec.Command("cp", "-a", dir+"/.", dest).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	doc, code := verifyJSON(t, filepath.Dir(dest), bin, "--key", pub, "evidence-copy")
	if code != 0 || !doc.OK || len(doc.Sessions) != 1 {
		t.Fatalf("the harvested copy: exit %d, %+v", code, doc)
	}
	s := doc.Sessions[0]
	var kinds []evidence.Kind
	for _, n := range s.Notes {
		kinds = append(kinds, n.Kind)
	}
	if s.Status != evidence.StatusOK || s.RunID != "run-p" || s.SessionID != "live-1" ||
		len(kinds) != 2 || kinds[0] != evidence.NoteFolderName || kinds[1] != evidence.NoteRunFolderName {
		t.Errorf("the harvested copy: status %s, run %q, session %q, notes %v", s.Status, s.RunID, s.SessionID, s.Notes)
	}
}

// TestVerifyWrongKeyIsOneFinding: a session checked against a key that
// did not sign it, finalized or cut and recovered, is one anomaly saying
// no checkpoint is signed by a trusted key, with the key that did sign:
// no "signed through record -1", no recovery statement to distrust.
func TestVerifyWrongKeyIsOneFinding(t *testing.T) {
	bin, signer, _, root := verifyFixture(t)
	wrong := writePubKey(t, newTestSigner(t).PublicKey())
	finalized := recordFinalized(t, root, "run-w", "sess-f", signer)
	cut := recordertest.Unfinalized(t, root, "run-w", "sess-c", signer, nil, nil)
	if err := recordertest.Recover(cut, signer); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{finalized, cut} {
		doc, code := verifyJSON(t, root, bin, "--key", wrong, dir)
		if code != 1 || doc.OK || len(doc.Sessions) != 1 {
			t.Fatalf("%s: exit %d, %+v", dir, code, doc)
		}
		s := doc.Sessions[0]
		if s.Status != evidence.StatusTampered || len(s.Anomalies) != 1 || s.Anomalies[0].Kind != evidence.KindUntrustedKey ||
			!strings.Contains(s.Anomalies[0].Msg, "no checkpoint is signed by a trusted key") ||
			!strings.Contains(s.Anomalies[0].Msg, "SHA256:") {
			t.Errorf("%s: status %s, anomalies %v; want exactly one untrusted-key", dir, s.Status, s.Anomalies)
		}
		text, _, _ := runVerifyIn(t, root, bin, "verify", "--key", wrong, dir)
		if bytes.Contains(text, []byte("-1")) || bytes.Contains(text, []byte("recover")) {
			t.Errorf("%s: the text report states what a wrong key cannot tell:\n%s", dir, text)
		}
	}
}

// TestVerifyLiveSession: a session recorded while verify runs is
// in-progress with its last signed record, exit 1 (not finalized), no
// anomaly; once closed it is ok. A session cut without a recorder holding
// it (a crash) is unfinalized.
func TestVerifyLiveSession(t *testing.T) {
	bin, signer, pub, root := verifyFixture(t)
	s, err := recorder.Create(root, recorder.Meta{RunID: "run-l", SessionID: "sess-live"}, recorder.Options{Signer: signer, Sync: recorder.SyncStrict})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Output([]byte("still typing\r\n")); err != nil {
		t.Fatal(err)
	}
	doc, code := verifyJSON(t, root, bin, "--key", pub, s.Dir())
	if code != 1 || len(doc.Sessions) != 1 {
		t.Fatalf("live session: exit %d, %+v", code, doc)
	}
	live := doc.Sessions[0]
	if live.Status != evidence.StatusInProgress || len(live.Anomalies) != 0 || live.LastVerifiedSeq < 1 || live.LastVerifiedOffset <= 0 {
		t.Errorf("live session: status %s, last signed record %d offset %d, anomalies %v", live.Status, live.LastVerifiedSeq, live.LastVerifiedOffset, live.Anomalies)
	}
	text, _, _ := runVerifyIn(t, root, bin, "verify", "--key", pub, s.Dir())
	if !bytes.HasPrefix(text, []byte("LIVE")) || !bytes.Contains(text, []byte("in progress")) || bytes.Contains(text, []byte("unfinalized")) {
		t.Errorf("live session, text report:\n%s", text)
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	if doc, code := verifyJSON(t, root, bin, "--key", pub, s.Dir()); code != 0 || doc.Sessions[0].Status != evidence.StatusOK {
		t.Errorf("after the close: exit %d, %+v", code, doc.Sessions)
	}

	cut := recordertest.Unfinalized(t, root, "run-l", "sess-cut", signer, nil, nil)
	doc, code = verifyJSON(t, root, bin, "--key", pub, cut)
	if c := doc.Sessions[0]; code != 1 || c.Status != evidence.StatusUnfinalized || len(c.Anomalies) != 1 || c.Anomalies[0].Kind != evidence.KindUnfinalized {
		t.Errorf("a session cut by a crash: exit %d, status %s, anomalies %v", code, c.Status, c.Anomalies)
	}
}

// TestVerifyJSONShape: every field name of verify --json is lowercase,
// no list is null, and every field the document holds is named in the
// README's schema section, for a session that verifies and for a run.
func TestVerifyJSONShape(t *testing.T) {
	bin, signer, pub, root := verifyFixture(t)
	dir := recordFinalized(t, root, "run-s", "sess-1", signer)
	readme, err := os.ReadFile("../docs/RECORD.md")
	if err != nil {
		t.Fatal(err)
	}
	_, schema, _ := strings.Cut(string(readme), "#### `verify --json`")
	schema, _, _ = strings.Cut(schema, "#### Anomaly kinds")
	lower := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	for _, args := range [][]string{{dir}, {"--run-dir", filepath.Join(root, "run-s")}} {
		out, _, code := runVerifyIn(t, root, bin, append([]string{"verify", "--json", "--key", pub}, args...)...)
		if code != 0 {
			t.Fatalf("verify --json %v: exit %d\n%s", args, code, out)
		}
		if bytes.Contains(out, []byte("null")) {
			t.Errorf("verify --json %v holds null:\n%s", args, out)
		}
		var doc any
		if err := json.Unmarshal(out, &doc); err != nil {
			t.Fatal(err)
		}
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, e := range v {
					if !lower.MatchString(k) {
						t.Errorf("field %q is not lowercase", k)
					}
					if !strings.Contains(schema, "`"+k+"`") {
						t.Errorf("field %q is not in README.md's verify --json section", k)
					}
					walk(e)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			}
		}
		walk(doc)
	}
}
