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
	st, err := crashed.Open("run-1", "sess-1", dir, func(map[string]string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	st.End(true)
	select {
	case <-st.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the crashed stream did not end")
	}
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
