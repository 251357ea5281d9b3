package ship

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/s3test"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// testShipper ships to the gateway g; its log is in buf.
func testShipper(t *testing.T, g *s3test.Gateway, cfg Config) (*Shipper, *testutil.LockedBuffer) {
	t.Helper()
	g.SetEnv(t)
	cfg.Endpoint, cfg.Bucket, cfg.Region, cfg.PathStyle = g.Endpoint, g.Bucket, g.Region, true
	if cfg.Prefix == "" {
		cfg.Prefix = "lab/"
	}
	buf := &testutil.LockedBuffer{}
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s, buf
}

// fakeSession makes a session folder with a pty folder's three files.
func fakeSession(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "run-1", "sess-1")
	if err := os.MkdirAll(filepath.Join(dir, vocab.PTYDir), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{vocab.TypescriptFile, vocab.TimingFile, vocab.LogFile} {
		if err := os.WriteFile(filepath.Join(dir, vocab.PTYDir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func appendFile(t *testing.T, path string, b []byte) int64 {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	return fi.Size()
}

type acks struct {
	mu  sync.Mutex
	got []map[string]string
}

func (a *acks) ack(attrs map[string]string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, attrs)
	return nil
}

func (a *acks) list() []map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]map[string]string(nil), a.got...)
}

func TestStreamShipsEachPointsSegmentsWithTheirChecksum(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	s, _ := testShipper(t, g, Config{})
	dir := fakeSession(t)
	var a acks
	st, err := s.Open("run-1", "sess-1", dir, a.ack)
	if err != nil {
		t.Fatal(err)
	}
	ts := filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile)
	n := appendFile(t, ts, []byte("first\n"))
	st.Point(map[string]int64{"pty/typescript": n})
	if !testutil.WaitUntil(func() bool { return len(a.list()) >= 1 }) {
		t.Fatal("no acknowledgement of the first point")
	}
	// The object is in the bucket while the session is open.
	var head struct {
		ChecksumSHA256 string
		ContentLength  int64
	}
	key := "lab/segments/run-1/sess-1/pty/typescript/00000001"
	if err := json.Unmarshal(g.AWS(t, "s3api", "head-object", "--bucket", g.Bucket, "--key", key, "--checksum-mode", "ENABLED"), &head); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("first\n"))
	if head.ChecksumSHA256 != base64.StdEncoding.EncodeToString(sum[:]) || head.ContentLength != 6 {
		t.Fatalf("segment object %+v", head)
	}
	got := a.list()[0]
	if got[vocab.AttrFile] != "pty/typescript" || got[vocab.AttrShipPart] != "1" || got[vocab.AttrShipOffset] != "0" || got[vocab.AttrShipLength] != "6" || got[vocab.AttrShipETag] == "" {
		t.Fatalf("shipped record %v", got)
	}
	n = appendFile(t, ts, []byte("second\n"))
	st.Point(map[string]int64{"pty/typescript": n})
	if !testutil.WaitUntil(func() bool { return len(a.list()) >= 2 }) {
		t.Fatal("no acknowledgement of the second point")
	}
	appendFile(t, ts, []byte("third\n"))
	st.End(true)
	select {
	case <-st.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("stream not shipped")
	}
	whole := filepath.Join(t.TempDir(), "ts")
	g.AWS(t, "s3api", "get-object", "--bucket", g.Bucket, "--key", "lab/sessions/run-1/sess-1/pty/typescript", whole)
	if b, _ := os.ReadFile(whole); string(b) != "first\nsecond\nthird\n" {
		t.Fatalf("whole typescript %q", b)
	}
	if n := len(a.list()); n != 2 {
		t.Fatalf("%d shipped records; the segment shipped after the end is not recorded (the chain is closed): want 2", n)
	}
	if st := s.Status(); st.State != StateOK || st.LagBytes != 0 {
		t.Fatalf("status %+v", st)
	}
}
