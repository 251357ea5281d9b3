package evidence

import (
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestUnsignedRange: records past the last trusted checkpoint are named
// first-last; none when the checkpoint covers every record, also when it
// covers exactly all of them.
func TestUnsignedRange(t *testing.T) {
	for _, tc := range []struct {
		signed, records int
		want            string
	}{{3, 5, "3-4"}, {4, 5, "4-4"}, {5, 5, "none"}, {0, 0, "none"}, {0, 2, "0-1"}} {
		r := Report{SignedRecords: tc.signed, Records: tc.records}
		if got := r.UnsignedRange(); got != tc.want {
			t.Errorf("%d of %d records signed: UnsignedRange = %q, want %q", tc.signed, tc.records, got, tc.want)
		}
	}
}

// TestUnaccountedStatement: the recovery's statement repeats each part it
// found, and only those: nothing for a cut that left nothing uncovered.
func TestUnaccountedStatement(t *testing.T) {
	torn := map[string]string{vocab.AttrLogTornOff: "20", vocab.AttrLogTornLen: "10", vocab.AttrLogTornSHA256: "ab"}
	tail := map[string]string{vocab.AttrUnaccountedOff: "100", vocab.AttrUnaccountedLen: "7", vocab.AttrUnaccountedSHA256: "cd"}
	notRead := map[string]string{vocab.AttrNotRead: "timing tail"}
	const (
		tornSays    = "the log's last line is a record cut mid-write, 10 bytes at offset 20 (sha256 ab)"
		tailSays    = "7 typescript bytes from offset 100 are not covered by the log (sha256 cd)"
		notReadSays = "the restarted sidecar did not read the timing tail"
	)
	all := map[string]string{}
	for _, m := range []map[string]string{torn, tail, notRead} {
		for k, v := range m {
			all[k] = v
		}
	}
	for _, tc := range []struct {
		name  string
		attrs map[string]string
		want  string
	}{
		{"nothing uncovered", map[string]string{}, ""},
		{"a torn last line", torn, tornSays},
		{"an uncovered tail", tail, tailSays},
		{"files not read", notRead, notReadSays},
		{"all three", all, tornSays + "; " + tailSays + "; " + notReadSays},
	} {
		if got := unaccountedStatement(tc.attrs); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
