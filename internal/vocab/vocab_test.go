package vocab_test

import (
	"regexp"
	"slices"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

func readmeTable(t *testing.T, heading string) [][]string {
	return testutil.ReadmeTable(t, "../../docs/RECORD.md", heading)
}

var names = testutil.CodeSpans

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
		if slices.Contains(hs, vocab.HeaderCloseReason) {
			reasons = names(row[1])
		}
	}
	sameSet(t, "provenance headers", headers, vocab.Headers)
	sameSet(t, "close reasons ("+vocab.HeaderCloseReason+" row)", reasons, vocab.CloseReasons)

	var types []string
	for _, row := range readmeTable(t, "### Integrity log and verification") {
		types = append(types, names(row[0])...)
	}
	sameSet(t, "integrity record types", types, vocab.RecordTypes)
}

// TestReadmeListsTheGapReasons holds the README's gap row to every gap
// reason the code writes: the row also names attributes and settings, so
// each reason must be there, and each name there that looks like a reason
// (lowercase words joined by hyphens, as every reason is) must be one.
func TestReadmeListsTheGapReasons(t *testing.T) {
	var row []string
	for _, r := range readmeTable(t, "### Integrity log and verification") {
		if slices.Equal(names(r[0]), []string{vocab.TypeGap}) {
			row = names(r[1])
		}
	}
	if row == nil {
		t.Fatal("README.md's integrity record table has no gap row")
	}
	var listed []string
	for _, n := range row {
		if reasonLike.MatchString(n) && !slices.Contains(listed, n) {
			listed = append(listed, n)
		}
	}
	sameSet(t, "gap reasons (gap row)", listed, vocab.GapReasons)
}

var reasonLike = regexp.MustCompile(`^[a-z]+(-[a-z]+)+$`)

// TestReadmeListsTheUnattributedReasons holds the README's unattributed
// row to the reasons the code writes.
func TestReadmeListsTheUnattributedReasons(t *testing.T) {
	var listed []string
	for _, r := range readmeTable(t, "### Integrity log and verification") {
		if slices.Equal(names(r[0]), []string{vocab.TypeUnattributed}) {
			for _, n := range names(r[1]) {
				if reasonLike.MatchString(n) && !slices.Contains(listed, n) {
					listed = append(listed, n)
				}
			}
		}
	}
	sameSet(t, "unattributed reasons (unattributed row)", listed, vocab.UnattributedReasons)
}
