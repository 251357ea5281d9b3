package witnessbudget

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTake: bytes are taken while they fit both budgets; the first that
// do not are refused, naming the budget, and so is everything after.
func TestTake(t *testing.T) {
	b := New(Limits{Run: 100, Volume: 150})
	steps := []struct {
		run  string
		n    int64
		want Spent
	}{
		{"a", 60, None}, {"a", 40, None}, // run a: 100, at its budget
		{"a", 1, Run},     // past it
		{"a", 0, Run},     // spent stays spent
		{"b", 40, None},   // volume: 140
		{"b", 20, Volume}, // 160 > 150
		{"c", 1, Volume},  // the volume's is spent for every run
	}
	for i, s := range steps {
		if got := b.Take(s.run, s.n); got != s.want {
			t.Fatalf("step %d: Take(%s, %d) = %v, want %v", i, s.run, s.n, got, s.want)
		}
	}
	if v, a := b.Used("a"); v != 140 || a != 100 {
		t.Errorf("used %d, run a %d; want 140 and 100", v, a)
	}
}

// TestNoLimits: 0 bounds nothing.
func TestNoLimits(t *testing.T) {
	b := New(Limits{})
	for range 1000 {
		if b.Take("r", 1<<40) != None {
			t.Fatal("an unbounded budget refused")
		}
	}
}

// TestAddCountsFilesAlreadyStored: what Scan found counts against both
// budgets, even past them.
func TestAddCountsFilesAlreadyStored(t *testing.T) {
	b := New(Limits{Run: 100, Volume: 1000})
	b.Add("old", 150)
	if b.Take("old", 1) != Run {
		t.Error("a run already past its budget took more")
	}
	if b.Take("new", 100) != None {
		t.Error("another run was refused")
	}
	if b.Take("new2", 800) != Volume {
		t.Error("the volume took more than its budget with the old run's files")
	}
}

// TestRunsBounded: past maxRuns, new runs share one count: the map does
// not grow with the runs a client names.
func TestRunsBounded(t *testing.T) {
	b := New(Limits{Run: 10})
	for i := range maxRuns + 100 {
		b.Take(string(rune(i+0x100)), 1)
	}
	if len(b.runs) > maxRuns+1 {
		t.Errorf("%d runs counted apart, bound %d", len(b.runs), maxRuns)
	}
	if _, shared := b.Used(string(rune(maxRuns + 50 + 0x100))); shared != 10 {
		t.Errorf("the shared count is %d, want the 10 its runs took before its budget", shared)
	}
}

// TestScan sums the witness files per run, and skips the sidecar's own
// folders, links and what is not a regular file.
func TestScan(t *testing.T) {
	root := t.TempDir()
	write := func(p string, n int) {
		t.Helper()
		mustOK(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o700))
		mustOK(t, os.WriteFile(filepath.Join(root, p), make([]byte, n), 0o600))
	}
	write("r1/s1/pcap/capture-000001.pcapng", 100)
	write("r1/s1/pcap/capture-000002.pcapng", 50)
	write("r1/s2/audit/audit-000001.log", 30)
	write("r1/s2/pty/typescript", 1000) // the transcript is never counted
	write("r2/s1/pcap/capture-000001.pcapng", 7)
	write("_sidecar/x/pcap/f", 999)
	write("outside/big", 5000)
	mustOK(t, os.Symlink(filepath.Join(root, "outside"), filepath.Join(root, "r2", "s1", "audit")))
	mustOK(t, os.Symlink(filepath.Join(root, "outside", "big"), filepath.Join(root, "r2", "s1", "pcap", "link")))
	used, err := Scan(root, []string{"pcap", "audit"})
	mustOK(t, err)
	if used["r1"] != 180 || used["r2"] != 7 || len(used) != 2 {
		t.Errorf("used %v, want r1 180 and r2 7", used)
	}
	if _, err := Scan(filepath.Join(root, "missing"), []string{"pcap"}); err != nil {
		t.Errorf("a missing root: %v", err)
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
