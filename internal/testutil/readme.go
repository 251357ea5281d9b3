package testutil

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// ReadmeTable returns the body rows of the first Markdown table after the
// line heading in the file at path (a README whose tables a test holds to
// the code), each split into its cells; the header row and the separator
// are left out.
func ReadmeTable(t testing.TB, path, heading string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", path, heading)
	}
	var rows [][]string
	seen := 0
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			if seen > 0 {
				break
			}
			continue
		}
		if seen++; seen <= 2 {
			continue // the header row and the separator
		}
		rows = append(rows, strings.Split(strings.Trim(line, "|"), " | "))
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no table after %q", path, heading)
	}
	return rows
}

// ReadmeCodeBlock returns the first fenced block of language lang
// ("sh", "js") after the line heading in the file at path: the lines a
// README tells a reader to run, which a test runs as written.
func ReadmeCodeBlock(t testing.TB, path, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", path, heading)
	}
	_, after, ok = strings.Cut(after, "```"+lang+"\n")
	block, _, closed := strings.Cut(after, "```")
	if !ok || !closed {
		t.Fatalf("%s: no ```%s block after %q", path, lang, heading)
	}
	return block
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// CodeSpans returns the `code` spans of a Markdown cell.
func CodeSpans(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}
