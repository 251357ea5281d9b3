package vocab

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeTable returns the rows of the first Markdown table after heading
// in README.md, each split into its cells.
func readmeTable(t *testing.T, heading string) [][]string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no heading %q", heading)
	}
	var rows [][]string
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if strings.HasPrefix(cells[0], "---") || strings.TrimSpace(cells[0]) == "type" || strings.TrimSpace(cells[0]) == "header" {
			continue
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("README.md has no table after %q", heading)
	}
	return rows
}

var codeName = regexp.MustCompile("`([^`]+)`")

// names returns the `code` spans of s.
func names(s string) []string {
	var out []string
	for _, m := range codeName.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

func sameSet(t *testing.T, what string, readme, code []string) {
	t.Helper()
	a, b := slices.Clone(readme), slices.Clone(code)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Errorf("%s: README.md lists %v, internal/vocab has %v", what, a, b)
	}
}

// TestReadmeListsTheVocabulary holds README.md's provenance-header and
// integrity-record tables, and its list of close reasons, to exactly the
// names the code writes.
func TestReadmeListsTheVocabulary(t *testing.T) {
	var headers, reasons []string
	for _, row := range readmeTable(t, "### Provenance headers") {
		hs := names(row[0])
		headers = append(headers, hs...)
		if slices.Contains(hs, HeaderCloseReason) {
			reasons = names(row[1])
		}
	}
	sameSet(t, "provenance headers", headers, Headers)
	sameSet(t, "close reasons ("+HeaderCloseReason+" row)", reasons, CloseReasons)

	var types []string
	for _, row := range readmeTable(t, "### Integrity log and verification") {
		types = append(types, names(row[0])...)
	}
	sameSet(t, "integrity record types", types, RecordTypes)
}
