package ship

import (
	"context"
	"os"
	"path/filepath"
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
	out := string(g.AWS(t, "s3api", "list-objects-v2", "--bucket", g.Bucket, "--prefix", prefix, "--query", "Contents[].Key", "--output", "text"))
	return strings.Fields(out)
}

// TestALabWideLogsInodeReusedIsAnotherFile: the inode of a removed file,
// given to a new one, does not carry the old one's offsets: the new file
// gets objects of its own from its first byte.
func TestALabWideLogsInodeReusedIsAnotherFile(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	s, _ := testShipper(t, g, Config{})
	root := t.TempDir()
	dir := filepath.Join(root, vocab.ProcAcctDir)
	os.Mkdir(dir, 0o700)
	live := filepath.Join(dir, vocab.ProcAcctFile)
	os.WriteFile(live, []byte("first file, a longer line than the next one\n"), 0o600)
	logs := s.RootLogs(root)
	if err := logs.Look(context.Background()); err != nil {
		t.Fatal(err)
	}
	ino, _, err := inode(root, vocab.ProcAcctDir+"/"+vocab.ProcAcctFile)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel may or may not hand the inode on; the known file is made
	// to stand for that case: a different file under the same inode.
	old := logs.known[vocab.ProcAcctDir][ino]
	os.WriteFile(live, []byte("second file\n"), 0o600)
	newIno, _, _ := inode(root, vocab.ProcAcctDir+"/"+vocab.ProcAcctFile)
	logs.known[vocab.ProcAcctDir] = map[uint64]*rootLog{newIno: old}
	if err := logs.Look(context.Background()); err != nil {
		t.Fatal(err)
	}
	now := logs.known[vocab.ProcAcctDir][newIno]
	if now == old || now.base == old.base || now.ship.off != int64(len("second file\n")) {
		t.Fatalf("the new file took the old one's objects: old %+v, now %+v", old, now)
	}
}
