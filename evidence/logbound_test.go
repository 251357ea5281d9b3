//go:build linux

package evidence_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// TestHugeSingleLineLogIsBounded verifies a session whose log is one
// 256 MiB line (a sparse file: no disk is used). The verifier and the head
// export must refuse the record at the record-length bound without holding
// the line: the bytes they allocate stay far below the file's size.
func TestHugeSingleLineLogIsBounded(t *testing.T) {
	const size = 256 << 20
	dir := filepath.Join(t.TempDir(), "run-1", "sess-big")
	pty := filepath.Join(dir, vocab.PTYDir)
	if err := os.MkdirAll(pty, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{vocab.TypescriptFile, vocab.TimingFile} {
		if err := os.WriteFile(filepath.Join(pty, name), []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(pty, vocab.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()

	allocated := func(run func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		run()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	var rep *evidence.Report
	if n := allocated(func() { rep = evidence.Verify(dir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{}) }); n > 32<<20 {
		t.Errorf("Verify allocated %d MiB for a %d MiB single-line log", n>>20, size>>20)
	}
	if rep.OK() || !strings.Contains(rep.Anomalies[0].Msg, "longer than") {
		t.Errorf("anomalies %v: want the record refused as longer than the bound", rep.Anomalies)
	}
	var headErr error
	if n := allocated(func() { _, _, headErr = evidence.LastHead(dir) }); n > 32<<20 {
		t.Errorf("LastHead allocated %d MiB for a %d MiB single-line log", n>>20, size>>20)
	}
	if headErr == nil || !strings.Contains(headErr.Error(), "longer than") {
		t.Errorf("LastHead: %v, want the record refused as longer than the bound", headErr)
	}
}
