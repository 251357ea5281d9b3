package ship

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/s3test"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestLabWideLogsAreShippedAcrossARotationAndARestart: _audit/audit.log's
// new bytes go as segments at each look; rotated, the file is finished and
// goes whole, and its successor gets objects of its own; a restarted
// shipper goes on with the same objects rather than start new ones.
func TestLabWideLogsAreShippedAcrossARotationAndARestart(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	s, _ := testShipper(t, g, Config{})
	root := t.TempDir()
	dir := filepath.Join(root, vocab.AuditRootDir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(dir, vocab.AuditLogFile)
	if err := os.WriteFile(live, []byte("type=SYSCALL one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := s.RootLogs(root)
	ctx := context.Background()
	if err := logs.Look(ctx); err != nil {
		t.Fatal(err)
	}
	appendFile(t, live, []byte("type=SYSCALL two\n"))
	if err := logs.Look(ctx); err != nil {
		t.Fatal(err)
	}
	// auditd's rotation: the live file becomes .1 and a new one starts.
	appendFile(t, live, []byte("type=SYSCALL three\n"))
	if err := os.Rename(live, live+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(live, []byte("type=SYSCALL four\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := logs.Look(ctx); err != nil {
		t.Fatal(err)
	}
	objs := listKeys(t, g, "lab/lab/_audit/")
	bases := map[string][]string{}
	for _, k := range objs {
		rest := strings.TrimPrefix(k, "lab/lab/_audit/")
		base, leaf, _ := strings.Cut(rest, "/")
		bases[base] = append(bases[base], leaf)
	}
	if len(bases) != 2 {
		t.Fatalf("objects %v: want those of two files", objs)
	}
	var rotated string
	for base, leaves := range bases {
		if strings.Join(leaves, ",") == "00000001,00000002,00000003,whole" {
			rotated = base
		}
	}
	if rotated == "" {
		t.Fatalf("no file with three segments and a whole object: %v", bases)
	}
	whole := filepath.Join(t.TempDir(), "whole")
	g.AWS(t, "s3api", "get-object", "--bucket", g.Bucket, "--key", "lab/lab/_audit/"+rotated+"/whole", whole)
	if b, _ := os.ReadFile(whole); string(b) != "type=SYSCALL one\ntype=SYSCALL two\ntype=SYSCALL three\n" {
		t.Fatalf("the rotated file whole: %q", b)
	}

	// A restart: the same files, more bytes in the live one.
	appendFile(t, live, []byte("type=SYSCALL five\n"))
	again, _ := testShipper(t, g, Config{})
	if err := again.RootLogs(root).Look(ctx); err != nil {
		t.Fatal(err)
	}
	after := listKeys(t, g, "lab/lab/_audit/")
	if len(after) != len(objs)+1 {
		t.Fatalf("after a restart: %v; want the live file's one new segment beside %v", after, objs)
	}
}

func listKeys(t *testing.T, g *s3test.Gateway, prefix string) []string {
	t.Helper()
	return slices.Sorted(maps.Keys(g.Objects(t, prefix)))
}
