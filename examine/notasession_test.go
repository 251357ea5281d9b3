package examine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// fakeSession makes a folder that looks like a session's: pty/integrity.jsonl.
func fakeSession(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, vocab.PTYDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, vocab.PTYDir, vocab.LogFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A capture root's hint names at most maxSessionHints sessions, the first
// in name order, and never the sidecar's own folder.
func TestCaptureRootHintIsBounded(t *testing.T) {
	root := t.TempDir()
	fakeSession(t, filepath.Join(root, vocab.SidecarDir, "s0"))
	for _, run := range []string{"run-a", "run-b"} {
		for _, s := range []string{"s1", "s2", "s3", "s4"} {
			fakeSession(t, filepath.Join(root, run, s))
		}
	}
	why := NotASessionReason(root, true)
	var want []string
	for _, p := range []string{"run-a/s1", "run-a/s2", "run-a/s3", "run-a/s4", "run-b/s1"} {
		want = append(want, filepath.Join(root, p))
	}
	if !strings.Contains(why, strings.Join(want, ", ")+" (") || strings.Contains(why, "run-b/s2") || strings.Contains(why, vocab.SidecarDir) {
		t.Errorf("hint %q, want exactly the sessions %v", why, want)
	}
}

// A folder that holds a witness folder but no pty/ is a session whose
// transcript was removed: it is verified (and found damaged), never
// waved through as not-a-session.
func TestSessionWithoutPTYIsVerified(t *testing.T) {
	for _, name := range []string{vocab.PcapDir, vocab.AuditDir, vocab.PTYDir} {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		rep := VerifySession(dir, evidence.Keys{}, evidence.Options{})
		if rep.Status != evidence.StatusTampered {
			t.Errorf("a folder holding only %s/: status %s, want %s", name, rep.Status, evidence.StatusTampered)
		}
	}
}

// A path through a file names no folder at all: not-a-session, never a
// damaged session whose files are missing. The resolver passes it on as
// a path (Lstat fails, but not with "does not exist"), so verify and play
// report it as the path it is.
func TestPathThroughAFileIsNotASession(t *testing.T) {
	file := filepath.Join(t.TempDir(), "afile")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	through := filepath.Join(file, "sub")
	rep := VerifySession(through, evidence.Keys{}, evidence.Options{})
	if rep.Status != evidence.StatusNotASession || len(rep.Anomalies) != 1 || !strings.Contains(rep.Anomalies[0].Msg, "is a file, not a folder") {
		t.Errorf("status %s, anomalies %v; want not-a-session naming the file in the path", rep.Status, rep.Anomalies)
	}
	if dir, err := ResolveSession(t.TempDir(), through); err != nil || dir != through {
		t.Errorf("ResolveSession(%q) = %q, %v; want the path itself", through, dir, err)
	}
	if _, err := ResolveSession(t.TempDir(), "/no/such/place"); !errors.Is(err, ErrNotAnID) || errors.Is(err, ErrNoSession) {
		t.Errorf("ResolveSession of a missing path: %v; want ErrNotAnID", err)
	}
}
