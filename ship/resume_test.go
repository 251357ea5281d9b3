package ship

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/s3test"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// sealedSession makes a session folder whose typescript spans three parts
// of a whole upload, with a manifest as a sealed session has.
func sealedSession(t *testing.T) (root, dir string, ts []byte) {
	root = t.TempDir()
	dir = filepath.Join(root, "run-1", "sess-1")
	if err := os.MkdirAll(filepath.Join(dir, vocab.PTYDir), 0o700); err != nil {
		t.Fatal(err)
	}
	ts = make([]byte, 2*WholePartSize+3<<20)
	rand.Read(ts)
	files := map[string][]byte{
		vocab.PTYDir + "/" + vocab.TypescriptFile: ts,
		vocab.PTYDir + "/" + vocab.TimingFile:     []byte("0.1 5\n"),
		vocab.PTYDir + "/" + vocab.LogFile:        []byte("{}\n"),
		vocab.ManifestFile:                        []byte("list\n"),
	}
	for rel, b := range files {
		if err := os.WriteFile(filepath.Join(dir, rel), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root, dir, ts
}

type openUpload struct {
	Key      string
	UploadID string `json:"UploadId"`
}

// shipSealed ships the sealed session folder dir of run-1/sess-1 with s
// and waits until its stream ends, shipped or cut.
func shipSealed(t *testing.T, s *Shipper, dir string) {
	t.Helper()
	st, err := s.Open("run-1", "sess-1", dir, func(map[string]string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	st.End(true)
	select {
	case <-st.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the stream did not end")
	}
}

func openUploads(t *testing.T, g *s3test.Gateway) []openUpload {
	var out struct{ Uploads []openUpload }
	if b := g.AWS(t, "s3api", "list-multipart-uploads", "--bucket", g.Bucket); len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
	}
	return out.Uploads
}

// TestAStartCompletesTheUploadACrashLeftOpen: the sidecar dies between
// the first and the second part of a file's whole upload; the next
// start's resume keeps the part that holds the local bytes, sends the
// rest, completes the upload, and says so.
func TestAStartCompletesTheUploadACrashLeftOpen(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	crashed, _ := testShipper(t, g, Config{})
	parts := 0
	crashed.testHook = func(op, key string) error {
		if op == "upload-part" {
			if parts++; parts == 2 {
				crashed.cancel() // the process is gone: nothing aborts the upload
				return context.Canceled
			}
		}
		return nil
	}
	root, dir, ts := sealedSession(t)
	shipSealed(t, crashed, dir)
	key := "lab/sessions/run-1/sess-1/pty/typescript"
	open := openUploads(t, g)
	if len(open) != 1 || open[0].Key != key {
		t.Fatalf("open uploads after the crash: %+v", open)
	}
	var listed struct{ Parts []struct{ PartNumber int } }
	json.Unmarshal(g.AWS(t, "s3api", "list-parts", "--bucket", g.Bucket, "--key", key, "--upload-id", open[0].UploadID), &listed)
	if len(listed.Parts) != 1 || listed.Parts[0].PartNumber != 1 {
		t.Fatalf("parts the crash left: %+v", listed)
	}

	next, log := testShipper(t, g, Config{})
	rep, err := next.Resume(context.Background(), root, []Folder{{"run-1", "sess-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != 1 || rep.Aborted != 0 || rep.Shipped != 1 {
		t.Fatalf("resume: %+v\n%s", rep, log)
	}
	if !strings.Contains(log.String(), "completed an upload a crash left open") || !strings.Contains(log.String(), "parts_kept=1 parts_sent=2") {
		t.Fatalf("the log does not say how the upload ended:\n%s", log)
	}
	if open := openUploads(t, g); len(open) != 0 {
		t.Fatalf("uploads still open: %+v", open)
	}
	got := filepath.Join(t.TempDir(), "typescript")
	g.AWS(t, "s3api", "get-object", "--bucket", g.Bucket, "--key", key, got)
	f, err := os.Open(got)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	want := sha256.Sum256(ts)
	if hex.EncodeToString(h.Sum(nil)) != hex.EncodeToString(want[:]) {
		t.Fatal("the completed object is not the local typescript")
	}
}

// TestAStartAbortsAnOpenUploadWhoseLocalFileIsGone: nothing is made up
// for a file the local copy no longer has.
func TestAStartAbortsAnOpenUploadWhoseLocalFileIsGone(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	key := "lab/sessions/run-1/gone/pty/typescript"
	g.AWS(t, "s3api", "create-multipart-upload", "--bucket", g.Bucket, "--key", key, "--checksum-algorithm", "SHA256")
	s, log := testShipper(t, g, Config{})
	rep, err := s.Resume(context.Background(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Aborted != 1 || rep.Completed != 0 {
		t.Fatalf("resume: %+v", rep)
	}
	if !strings.Contains(log.String(), "its local file is gone; aborted") {
		t.Fatalf("log:\n%s", log)
	}
	if open := openUploads(t, g); len(open) != 0 {
		t.Fatalf("uploads still open: %+v", open)
	}
	heads, err := g.TryAWS("s3api", "head-object", "--bucket", g.Bucket, "--key", key)
	if err == nil {
		t.Fatalf("an object was made for a file the local copy lacks: %s", heads)
	}
}

// TestFoldSegmentsStopsAtTheFirstHole: a start goes on from the end of a
// file's parts numbered without a hole, as the store lists them.
func TestFoldSegmentsStopsAtTheFirstHole(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	s, _ := testShipper(t, g, Config{})
	body := filepath.Join(t.TempDir(), "b")
	for key, n := range map[string]int{"pty/typescript/00000001": 10, "pty/typescript/00000002": 5, "pty/typescript/00000004": 7, "pty/timing/00000002": 3} {
		os.WriteFile(body, make([]byte, n), 0o600)
		g.AWS(t, "s3api", "put-object", "--bucket", g.Bucket, "--key", "lab/segments/r/s/"+key, "--body", body)
	}
	got, err := s.foldSegments(context.Background(), "lab/segments/r/s/")
	if err != nil {
		t.Fatal(err)
	}
	if ts := got["pty/typescript"]; ts == nil || ts.next != 3 || ts.off != 15 {
		t.Fatalf("typescript: %+v", ts)
	}
	if tm := got["pty/timing"]; tm == nil || tm.next != 1 || tm.off != 0 {
		t.Fatalf("timing, whose part 1 is missing: %+v", tm)
	}
}

// TestAWholeUploadTheStoreDropsIsBegunAgain: a lifecycle rule (here the
// aws CLI) aborts a whole file's upload after its first part; the
// shipper begins it again and the object is the local file.
func TestAWholeUploadTheStoreDropsIsBegunAgain(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	s, log := testShipper(t, g, Config{})
	key := "lab/sessions/run-1/sess-1/pty/typescript"
	parts := 0
	s.testHook = func(op, k string) error {
		if op == "upload-part" && k == key {
			if parts++; parts == 2 {
				for _, u := range openUploads(t, g) {
					g.AWS(t, "s3api", "abort-multipart-upload", "--bucket", g.Bucket, "--key", u.Key, "--upload-id", u.UploadID)
				}
			}
		}
		return nil
	}
	_, dir, ts := sealedSession(t)
	shipSealed(t, s, dir)
	if !strings.Contains(log.String(), "the store dropped a whole file's upload; begun again") {
		t.Fatalf("log:\n%s", log)
	}
	got := filepath.Join(t.TempDir(), "typescript")
	g.AWS(t, "s3api", "get-object", "--bucket", g.Bucket, "--key", key, got)
	b, _ := os.ReadFile(got)
	if sha256.Sum256(b) != sha256.Sum256(ts) {
		t.Fatal("the object is not the local typescript")
	}
}

// TestAStartShipsAgainAWholeObjectOfAnotherSize: a whole object that is
// not the local file's size (a stale or replaced one) is no shipped file:
// the start ships it again.
func TestAStartShipsAgainAWholeObjectOfAnotherSize(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	s, _ := testShipper(t, g, Config{})
	dir := shippedFolder(t, s, "resized")
	key := wholeKey("lab/", "run-1", "resized", "pty/timing")
	body := filepath.Join(t.TempDir(), "short")
	os.WriteFile(body, []byte("0.1"), 0o600)
	g.AWS(t, "s3api", "put-object", "--bucket", g.Bucket, "--key", key, "--body", body)
	rep, err := s.Resume(context.Background(), filepath.Dir(filepath.Dir(dir)), []Folder{{"run-1", "resized"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Shipped != 1 {
		t.Fatalf("resume: %+v", rep)
	}
	got := filepath.Join(t.TempDir(), "timing")
	g.AWS(t, "s3api", "get-object", "--bucket", g.Bucket, "--key", key, got)
	if b, _ := os.ReadFile(got); string(b) != "0.1 6\n" {
		t.Fatalf("whole timing after the resume: %q", b)
	}
	// Whole again: the next start ships nothing.
	if rep, err := s.Resume(context.Background(), filepath.Dir(filepath.Dir(dir)), []Folder{{"run-1", "resized"}}); err != nil || rep.Shipped != 0 || rep.Checked != 1 {
		t.Fatalf("second resume: %+v, %v", rep, err)
	}
}
