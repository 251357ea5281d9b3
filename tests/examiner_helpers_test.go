package tests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// Helpers of the examiner's tests (verify, export, recovery): sessions
// written in-process, with or without a close, and the command run with a
// deadline so a hang fails the test instead of stalling it.

func newTestSigner(t *testing.T) gossh.Signer {
	t.Helper()
	return testutil.NewSigner()
}

// recordFinalized records a short finalized session with the real
// recorder under root/run/id and returns its directory.
func recordFinalized(t *testing.T, root, run, id string, signer gossh.Signer) string {
	t.Helper()
	s, err := recorder.Create(root, recorder.Meta{RunID: run, SessionID: id, Term: "xterm"}, recorder.Options{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Output([]byte("hello from the session\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Input([]byte("exit\r")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	return s.Dir()
}

// writeUnfinalized writes, as a sidecar killed mid-session leaves it, a
// session root/run/id whose log has an open record, a data record, a
// checkpoint signed by signer, then two records no checkpoint covers
// (records 3 and 4), and no close. attrs are added to the open record.
func writeUnfinalized(t *testing.T, root, run, id string, signer gossh.Signer, attrs map[string]string) string {
	t.Helper()
	dir := filepath.Join(root, run, id)
	if err := os.MkdirAll(filepath.Join(dir, vocab.PTYDir), 0o700); err != nil {
		t.Fatal(err)
	}
	header := []byte("Script started on 2026-01-01 00:00:00+00:00 [COMMAND=\"bash\"]\n")
	body := []byte("hello\r\nworld\r\n")
	ts := append(append([]byte(nil), header...), body...)
	writeFile(t, filepath.Join(dir, "pty", vocab.TypescriptFile), ts)
	writeFile(t, filepath.Join(dir, "pty", vocab.TimingFile), []byte("O 0.100000 7\nO 0.100000 7\n"))
	f, err := os.Create(filepath.Join(dir, "pty", vocab.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hsum := sha256.Sum256(header)
	open := map[string]string{
		vocab.AttrRunID: run, vocab.AttrSessionID: id, vocab.AttrFormat: vocab.Format,
		vocab.AttrHeaderLen: strconv.Itoa(len(header)), vocab.AttrHeaderSum: hex.EncodeToString(hsum[:]),
	}
	for k, v := range attrs {
		open[k] = v
	}
	w := integrity.NewWriter(f, run, id, signer, func() time.Time { return time.Unix(1767225600, 0) })
	steps := []func() error{
		func() error { return w.Append(vocab.TypeOpen, open) },
		func() error { return w.Data(vocab.StreamOut, int64(len(header)), body[:7]) },
		func() error { return w.Checkpoint(prefixAttrs(ts[:len(header)+7], []byte("O 0.100000 7\n"))) },
		func() error { return w.Data(vocab.StreamOut, int64(len(header))+7, body[7:]) },
		func() error { return w.Append("request", map[string]string{"request": "window-change"}) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// prefixAttrs are a checkpoint's sizes and digests of the transcript files.
func prefixAttrs(ts, tm []byte) map[string]string {
	tsSum, tmSum := sha256.Sum256(ts), sha256.Sum256(tm)
	return map[string]string{
		vocab.AttrTSSize: strconv.Itoa(len(ts)), vocab.AttrTSSHA256: hex.EncodeToString(tsSum[:]),
		vocab.AttrTMSize: strconv.Itoa(len(tm)), vocab.AttrTMSHA256: hex.EncodeToString(tmSum[:]),
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writePubKey writes key as a .pub file and returns its path.
func writePubKey(t *testing.T, key gossh.PublicKey) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "host.pub")
	writeFile(t, path, gossh.MarshalAuthorizedKey(key))
	return path
}

// runCommand runs the built binary with a deadline and returns its
// combined output and exit code; a run past the deadline fails the test.
func runCommand(t *testing.T, bin string, args ...string) ([]byte, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within the deadline; output:\n%s", filepath.Base(bin), args, out)
	}
	return out, exitCodeOf(err)
}
