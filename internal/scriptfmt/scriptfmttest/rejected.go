// Package scriptfmttest holds the test table that the timing parser
// (internal/scriptfmt) and the verifier (evidence) are both held to.
package scriptfmttest

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// RejectedLines returns the timing-file tails of
// internal/scriptfmt/testdata/rejected-lines.txt: lines the recorder never
// writes, which must be refused naming the file and line.
func RejectedLines(t testing.TB) []string {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "testdata", "rejected-lines.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var tails []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			tail, err := strconv.Unquote(line)
			if err != nil {
				t.Fatalf("rejected-lines.txt line %q: %v", line, err)
			}
			tails = append(tails, tail)
		}
	}
	return tails
}
