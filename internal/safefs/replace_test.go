package safefs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReplaceFileIsWholeAndLeavesNoTemporary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ready")
	for _, body := range []string{"first\n", "second, longer\n"} {
		if err := ReplaceFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		fi, _ := os.Stat(path)
		if err != nil || string(got) != body || fi.Mode().Perm() != 0o644 {
			t.Fatalf("after replacing with %q: %q %v, mode %v", body, got, err, fi.Mode())
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the folder holds %d entries, want the file alone", len(entries))
	}
	if err := ReplaceFile(filepath.Join(dir, "missing", "x"), nil, 0o600); err == nil {
		t.Error("a file in a missing folder was written")
	}
}
