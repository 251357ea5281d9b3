package ship

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/s3test"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// shippedFolder makes a small sealed session folder run-1/<session>
// (typescript "hello\n"), ships it with s and waits until it is shipped.
func shippedFolder(t *testing.T, s *Shipper, session string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run-1", session)
	if err := os.MkdirAll(filepath.Join(dir, vocab.PTYDir), 0o700); err != nil {
		t.Fatal(err)
	}
	for rel, b := range map[string]string{
		"pty/typescript": "hello\n", "pty/timing": "0.1 6\n", "pty/integrity.jsonl": "{}\n", vocab.ManifestFile: "list\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.Open("run-1", session, dir, func(map[string]string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	st.End(true)
	select {
	case <-st.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end")
	}
	return dir
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// findings is Compare's kinds by file and part.
func findings(t *testing.T, s *Shipper, dir, session string, claims []evidence.ShippedPart, recorded int) (map[string]bool, string) {
	t.Helper()
	c, err := Compare(context.Background(), s.st.cfg, dir, "run-1", session, claims, recorded)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(c.Findings, func(a, b Finding) int {
		return cmp.Or(strings.Compare(a.File, b.File), a.Part-b.Part)
	}) {
		t.Errorf("findings not by file, then part: %+v", c.Findings)
	}
	got := map[string]bool{}
	var details []string
	for _, f := range c.Findings {
		got[f.Kind+" "+f.File+" "+strconv.Itoa(f.Part)] = true
		details = append(details, f.Detail)
	}
	return got, strings.Join(details, "; ")
}

// TestCompareFindsEachDifference: verify --shipped's findings, each from
// one change to an intact shipped session, and none where nothing changed.
func TestCompareFindsEachDifference(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	s, _ := testShipper(t, g, Config{})
	good := evidence.ShippedPart{Seq: 3, File: "pty/typescript", Part: 1, Offset: 0, Length: 6, SHA256: sha256Hex("hello\n")}
	body := filepath.Join(t.TempDir(), "body")
	put := func(key, content string) {
		os.WriteFile(body, []byte(content), 0o600)
		g.AWS(t, "s3api", "put-object", "--bucket", g.Bucket, "--key", key, "--body", body, "--checksum-algorithm", "SHA256")
	}
	seg := func(session, rel string, part int) string { return segmentKey("lab/", "run-1", session, rel, part) }

	for _, tc := range []struct {
		name     string
		change   func(session, dir string)
		claims   []evidence.ShippedPart
		recorded int
		want     []string // kind file part; empty: no finding
		detail   string   // what one finding's detail says, where it matters
	}{
		{name: "intact", claims: []evidence.ShippedPart{good}, recorded: 1},
		{name: "claim-digest", claims: []evidence.ShippedPart{{Seq: 3, File: "pty/typescript", Part: 1, Length: 6, SHA256: sha256Hex("other\n")}}, recorded: 1,
			want: []string{"wrong-digest pty/typescript 1"}},
		{name: "claim-place", claims: []evidence.ShippedPart{{Seq: 3, File: "pty/typescript", Part: 1, Offset: 1, Length: 5, SHA256: good.SHA256}}, recorded: 1,
			want: []string{"wrong-digest pty/typescript 1"}},
		{name: "claim-absent", claims: []evidence.ShippedPart{good, {Seq: 4, File: "pty/typescript", Part: 2, Offset: 6, Length: 1}}, recorded: 2,
			want: []string{"missing-part pty/typescript 2"}},
		{name: "malformed", claims: []evidence.ShippedPart{good}, recorded: 3,
			want: []string{"malformed-record pty/integrity.jsonl 0"}},
		{name: "hole", change: func(session, _ string) { put(seg(session, "pty/typescript", 3), "late\n") },
			want: []string{"missing-part pty/typescript 2"}, detail: "parts 2 to 2 are not in the bucket"},
		{name: "overwritten-segment", change: func(session, _ string) { put(seg(session, "pty/typescript", 1), "HELLO\n") },
			want: []string{"wrong-digest pty/typescript 1"}},
		{name: "past-the-end", change: func(session, _ string) { put(seg(session, "pty/timing", 2), "0.2 1\n") },
			want: []string{"extra-bytes pty/timing 2"}, detail: "the part reaches byte 12; the local file has 6"},
		{name: "foreign-file", change: func(session, _ string) { put(seg(session, "pty/notes", 1), "planted\n") },
			want: []string{"extra-bytes pty/notes 0"}},
		{name: "local-grew", change: func(_, dir string) {
			f, _ := os.OpenFile(filepath.Join(dir, "pty/typescript"), os.O_WRONLY|os.O_APPEND, 0)
			f.Write([]byte("more\n"))
			f.Close()
		}, want: []string{"unshipped pty/typescript 0", "wrong-digest pty/typescript 0"}},
		{name: "whole-deleted", change: func(session, _ string) {
			g.AWS(t, "s3api", "delete-object", "--bucket", g.Bucket, "--key", wholeKey("lab/", "run-1", session, "pty/timing"))
		}, want: []string{"missing-object pty/timing 0"}},
		{name: "whole-same-size", change: func(session, _ string) { put(wholeKey("lab/", "run-1", session, "pty/typescript"), "HELLO\n") },
			want: []string{"wrong-digest pty/typescript 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := "cmp-" + tc.name
			dir := shippedFolder(t, s, session)
			if tc.change != nil {
				tc.change(session, dir)
			}
			got, details := findings(t, s, dir, session, tc.claims, tc.recorded)
			if tc.detail != "" && !strings.Contains(details, tc.detail) {
				t.Errorf("details %q, want one saying %q", details, tc.detail)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("findings %v, want %v", got, tc.want)
			}
			for _, w := range tc.want {
				if !got[w] {
					t.Fatalf("findings %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestCompareCountsWhatItComparedAndHoldsAnUnsealedFolderToSegmentsOnly:
// an intact session's four files are compared as segments and whole; a
// session that ended unsealed (no manifest, no whole objects) is no
// missing-object.
func TestCompareCountsWhatItComparedAndHoldsAnUnsealedFolderToSegmentsOnly(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	s, _ := testShipper(t, g, Config{})
	dir := shippedFolder(t, s, "counted")
	c, err := Compare(context.Background(), s.st.cfg, dir, "run-1", "counted", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Segments != 4 || c.Whole != 4 || len(c.Findings) != 0 {
		t.Fatalf("intact: %+v, want 4 segments and 4 whole objects compared", c)
	}

	cut := filepath.Join(t.TempDir(), "run-1", "cut")
	os.MkdirAll(filepath.Join(cut, vocab.PTYDir), 0o700)
	os.WriteFile(filepath.Join(cut, "pty/typescript"), []byte("cut short\n"), 0o600)
	st, err := s.Open("run-1", "cut", cut, func(map[string]string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	st.End(false)
	<-st.Done()
	c, err = Compare(context.Background(), s.st.cfg, cut, "run-1", "cut", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Segments != 1 || c.Whole != 0 || len(c.Findings) != 0 {
		t.Fatalf("unsealed: %+v, want its one segment compared and no finding", c)
	}
}
