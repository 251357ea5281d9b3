//go:build linux

package evidence_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/scriptfmt/scriptfmttest"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// TestVerifyRejectsUnwrittenTimingLines appends each line scriptreplay
// would not read as this project writes it to a recorded session's timing
// file, and wants verify to report it, naming the file and the line.
func TestVerifyRejectsUnwrittenTimingLines(t *testing.T) {
	runDir := recordertest.NewRunDir(t)
	recordertest.Record(t, runDir, recordertest.PTYSpec("s1"))
	dir := filepath.Join(runDir, "kali-side", "s1")
	tm := filepath.Join(dir, vocab.PTYDir, vocab.TimingFile)
	orig, err := os.ReadFile(tm)
	if err != nil {
		t.Fatal(err)
	}
	if rep := evidence.Verify(dir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{}); !rep.OK() {
		t.Fatalf("the untouched session does not verify: %v", rep.Anomalies)
	}
	line := bytes.Count(orig, []byte("\n")) + 1
	want := fmt.Sprintf("%s:%d: ", vocab.TimingFile, line)
	for _, tail := range scriptfmttest.RejectedLines(t) {
		t.Run(strconv.Quote(tail), func(t *testing.T) {
			if err := os.WriteFile(tm, append(append([]byte{}, orig...), tail...), 0o600); err != nil {
				t.Fatal(err)
			}
			rep := evidence.Verify(dir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
			for _, a := range rep.Anomalies {
				if a.File == vocab.TimingFile && a.Offset == int64(len(orig)) && strings.Contains(a.Msg, want) {
					return
				}
			}
			t.Errorf("no anomaly in %s at offset %d naming line %d; got %v", vocab.TimingFile, len(orig), line, rep.Anomalies)
		})
	}
}
