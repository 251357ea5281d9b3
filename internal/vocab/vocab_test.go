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

// rowReasons are the names in the second column of the integrity record
// table's row of record type typ that look like reasons (lowercase words
// joined by hyphens, as every reason is): the row also names attributes
// and settings, so each reason must be there, and each name there that
// looks like a reason must be one.
func rowReasons(t *testing.T, typ string) []string {
	t.Helper()
	var row []string
	found := false
	for _, r := range readmeTable(t, "### Integrity log and verification") {
		if slices.Equal(names(r[0]), []string{typ}) {
			row, found = names(r[1]), true
		}
	}
	if !found {
		t.Fatalf("README.md's integrity record table has no %s row", typ)
	}
	var listed []string
	for _, n := range row {
		if reasonLike.MatchString(n) && !slices.Contains(listed, n) {
			listed = append(listed, n)
		}
	}
	return listed
}

var reasonLike = regexp.MustCompile(`^[a-z]+(-[a-z]+)+$`)

// TestReadmeListsTheRecordReasons holds the README's gap, unattributed and
// pty-eof rows to the reasons the code writes in each.
func TestReadmeListsTheRecordReasons(t *testing.T) {
	for _, c := range []struct {
		typ     string
		reasons []string
	}{
		{vocab.TypeGap, vocab.GapReasons},
		{vocab.TypeUnattributed, vocab.UnattributedReasons},
		{vocab.TypePTYEOF, vocab.EOFNotReasons},
	} {
		sameSet(t, c.typ+" reasons ("+c.typ+" row)", rowReasons(t, c.typ), c.reasons)
	}
}
