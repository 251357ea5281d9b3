package compose

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// liveReadmeHarvest runs compose/README.md's "Harvest and verify" lines as
// written, in a fresh folder laid out as the repository's root after
// up.sh (compose/local/known_hosts), on a session of the live pair: the
// binary copied out of the image verifies the harvested folder. Only the
// ids change, to a session this suite recorded.
func liveReadmeHarvest(t *testing.T, s *liveStack) {
	const session = "s-readme"
	if out, err := s.ssh(30*time.Second, session, false, "echo harvested-as-written"); err != nil {
		t.Fatalf("session: %v\n%s", err, out)
	}
	block := testutil.ReadmeCodeBlock(t, repoFile(t, "compose/README.md"), "## Harvest and verify", "sh")
	if !strings.Contains(block, "run1/s1") {
		t.Fatalf("the harvest block no longer names run1/s1; this test substitutes those ids:\n%s", block)
	}
	block = strings.ReplaceAll(block, "run1/s1", liveRunID+"/"+session)
	block = strings.ReplaceAll(block, "harvest/run1\n", "harvest/"+liveRunID+"\n")
	work := t.TempDir()
	if err := os.MkdirAll(filepath.Join(work, "compose", "local"), 0o700); err != nil {
		t.Fatal(err)
	}
	pinned, err := os.ReadFile(filepath.Join(s.dir, "known_hosts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "compose", "local", "known_hosts"), pinned, 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(work, "harvest.sh")
	if err := os.WriteFile(script, []byte("set -e\ncd "+work+"\n"+block), 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, 2*time.Minute, nil, "sh", script)
	if err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("compose/README.md's harvest, as written: %v\n%s\nthe lines:\n%s", err, out, block)
	}
	ts, err := os.ReadFile(filepath.Join(work, "harvest", liveRunID, session, "pty", "typescript"))
	if err != nil || !strings.Contains(string(ts), "harvested-as-written") {
		t.Errorf("the harvested typescript: %v\n%s", err, ts)
	}
}
