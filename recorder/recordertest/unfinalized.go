package recordertest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// UnfinalizedHeader and UnfinalizedBody are the typescript of Unfinalized:
// its start line, then the bytes of its two data records (7 bytes each).
const (
	UnfinalizedHeader = "Script started on 2026-01-01 00:00:00+00:00 [COMMAND=\"bash\"]\n"
	UnfinalizedBody   = "hello\r\nworld\r\n"
)

// Unfinalized writes, as a sidecar killed mid-session leaves it, a session
// root/run/id whose log has an open record (with attrs added), a data
// record, a checkpoint signed by signer, then two records no checkpoint
// covers (records 3 and 4: the body's last 7 bytes and a window change),
// and no close. extra, when not nil, appends more records through the
// chain's writer. It returns the session's folder.
func Unfinalized(t testing.TB, root, run, id string, signer gossh.Signer, attrs map[string]string, extra func(*integrity.Writer) error) string {
	t.Helper()
	dir := filepath.Join(root, run, id)
	if err := os.MkdirAll(filepath.Join(dir, vocab.PTYDir), 0o700); err != nil {
		t.Fatal(err)
	}
	header, body := []byte(UnfinalizedHeader), []byte(UnfinalizedBody)
	ts := append(append([]byte(nil), header...), body...)
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, vocab.PTYDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(vocab.TypescriptFile, ts)
	write(vocab.TimingFile, []byte("O 0.100000 7\nO 0.100000 7\n"))
	f, err := os.Create(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
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
		func() error { return w.Checkpoint(PrefixAttrs(ts[:len(header)+7], []byte("O 0.100000 7\n"))) },
		func() error { return w.Data(vocab.StreamOut, int64(len(header))+7, body[7:]) },
		func() error { return w.Append("request", map[string]string{"request": "window-change"}) },
	}
	if extra != nil {
		steps = append(steps, func() error { return extra(w) })
	}
	steps = append(steps, w.Flush)
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// PrefixAttrs are a checkpoint's sizes and digests of the transcript files.
func PrefixAttrs(ts, tm []byte) map[string]string {
	tsSum, tmSum := sha256.Sum256(ts), sha256.Sum256(tm)
	return map[string]string{
		vocab.AttrTSSize: strconv.Itoa(len(ts)), vocab.AttrTSSHA256: hex.EncodeToString(tsSum[:]),
		vocab.AttrTMSize: strconv.Itoa(len(tm)), vocab.AttrTMSHA256: hex.EncodeToString(tmSum[:]),
	}
}
