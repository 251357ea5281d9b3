package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestTSPassReadShortFile: the pass reads exactly the bytes asked for and
// reports each as progress; a file that ends before them (it shrank after
// its size was read) is io.ErrUnexpectedEOF, never a short read passed off
// as whole.
func TestTSPassReadShortFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typescript")
	if err := os.WriteFile(path, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var progress int64
	v := &verifier{opts: Options{Progress: func(n int64) { progress += n }}}
	p := newTSPass(v, f, 10)
	h := sha256.New()
	if err := p.read(2, 5, h); err != nil || progress != 5 {
		t.Fatalf("read of bytes 2..7: %v, progress %d", err, progress)
	}
	if want := sha256.Sum256([]byte("23456")); string(h.Sum(nil)) != string(want[:]) {
		t.Error("the digest is not of bytes 2..7")
	}
	if err := p.read(8, 5, sha256.New()); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read past the end: %v, want io.ErrUnexpectedEOF", err)
	}
}

// A typescript of a header line and two data records of 7 bytes each:
// bytes 0..15, 15..22 and 22..29.
const (
	passHeader = "Script started\n"
	passRec1   = "hello\r\n"
	passRec2   = "world\r\n"
)

// passOver is a typescript pass over a file holding content, and the
// progress it reports, summed.
func passOver(t *testing.T, content string) (*tsPass, *int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), vocab.TypescriptFile)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	read := new(int64)
	v := &verifier{rep: &Report{}, opts: Options{Progress: func(n int64) { *read += n }}}
	return newTSPass(v, f, int64(len(content))), read
}

func hexSum(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// wantFindings fails unless the pass reported exactly want, in order.
func wantFindings(t *testing.T, p *tsPass, want ...Anomaly) {
	t.Helper()
	if !slices.Equal(p.v.rep.Anomalies, want) {
		t.Errorf("findings\n %+v\nwant\n %+v", p.v.rep.Anomalies, want)
	}
}

// Equivalent mutants (gremlins), which change nothing observable:
//   - tspass.go:98 `to <= p.pos` -> `<`: equivalent: advance(p.pos) then reads 0
//     bytes (no progress, no digest input) and leaves p.pos as it was.
//   - tspass.go:232 `len(p.deferred) > 0` -> `>= 0`: equivalent: a window with
//     no records checks nothing in finish(), and covered() drops it by its
//     claimSeq as it would drop none.
//   - tspass.go:136 (both) is killed by TestTSPassDeferredRecordsAreBounded; in
//     findings alone it would be equivalent (both paths compare the same digest).

// A session cut right after its script header line (the sidecar died
// before any output): a typescript that is exactly the header the open
// record vouches for is no header mismatch.
func TestTSPassHeaderOnlyTypescript(t *testing.T) {
	p, read := passOver(t, passHeader)
	p.header(int64(len(passHeader)), hexSum(passHeader))
	wantFindings(t, p)
	if p.damaged || p.good != int64(len(passHeader)) || *read != int64(len(passHeader)) {
		t.Errorf("damaged %v, good %d, read %d; want false, %d, %d", p.damaged, p.good, *read, len(passHeader), len(passHeader))
	}
}

// A typescript cut inside a data record's bytes (copied while the
// sidecar wrote, or truncated by hand) is truncation at the record, with
// the file's end and the record's range, never an unreadable file.
func TestTSPassRecordPastTheEnd(t *testing.T) {
	p, _ := passOver(t, passHeader+passRec1[:5])
	p.header(15, hexSum(passHeader))
	p.data(dataClaim{seq: 1, off: 15, len: 7, sha: hexSum(passRec1)})
	wantFindings(t, p, Anomaly{Kind: KindFileTruncated, File: vocab.TypescriptFile, Seq: 1, Offset: 20, End: 22, Expected: "22", Actual: "20",
		Msg: "typescript ends at 20, inside this record's bytes 15..22 (truncated)"})
	if !p.ended {
		t.Error("the pass does not know the file ended")
	}
}

// check, re-reading a record one by one, never reads past the file's end
// either: the record is truncation, reported once. (Through data() the
// same guard at its top comes first; this pins check's own.)
func TestTSPassCheckPastTheEnd(t *testing.T) {
	p, read := passOver(t, passHeader+passRec1[:5])
	if !p.check(dataClaim{seq: 1, off: 15, len: 7, sha: hexSum(passRec1)}) {
		t.Error("a record past the end checked out")
	}
	p.check(dataClaim{seq: 2, off: 22, len: 7, sha: hexSum(passRec2)})
	wantFindings(t, p, Anomaly{Kind: KindFileTruncated, File: vocab.TypescriptFile, Seq: 1, Offset: 20, End: 22, Expected: "22", Actual: "20",
		Msg: "typescript ends at 20, inside this record's bytes 15..22 (truncated)"})
	if *read != 0 {
		t.Errorf("%d bytes read for records past the end", *read)
	}
}

// One byte flipped in a data record's bytes, under an honest prefix
// claim: the finding names the record and exactly its byte range.
func TestTSPassFlippedByteNamesTheRecordsRange(t *testing.T) {
	p, _ := passOver(t, passHeader+"hellO\r\n"+passRec2)
	p.header(15, hexSum(passHeader))
	p.data(dataClaim{seq: 1, off: 15, len: 7, sha: hexSum(passRec1)})
	p.data(dataClaim{seq: 2, off: 22, len: 7, sha: hexSum(passRec2)})
	p.claim(3, 29, hexSum(passHeader+passRec1+passRec2))
	wantFindings(t, p, Anomaly{Kind: KindDataDigestMismatch, File: vocab.TypescriptFile, Seq: 1, Offset: 15, End: 22,
		Expected: hexSum(passRec1), Actual: hexSum("hellO\r\n"), Msg: "bytes 15..22 differ from the recorded digest"})
	if p.unexplained != nil {
		t.Errorf("damage a data record explains is also left unexplained: %+v", p.unexplained)
	}
}

// A trusted claim on fewer typescript bytes than the data records before
// it reach (here 20, inside record 1's bytes 15..22), with the right
// digest of those 20 bytes: no recorder writes it, and the pass cannot
// compare it; it is a malformed record.
func TestTSPassPrefixClaimShortOfTheRecords(t *testing.T) {
	content := passHeader + passRec1
	p, _ := passOver(t, content)
	p.header(15, hexSum(passHeader))
	p.data(dataClaim{seq: 1, off: 15, len: 7, sha: hexSum(passRec1)})
	p.claim(2, 20, hexSum(content[:20]))
	wantFindings(t, p, Anomaly{Kind: KindRecordMalformed, File: vocab.LogFile, Seq: 2, Offset: -1, End: -1,
		Msg: "record vouches for 20 typescript bytes, fewer than the data records before it reach (22)"})
}

// The data records waiting for a prefix claim are bounded: maxDeferred
// wait, and the next is checked at once (its bytes hashed twice, read
// once), so a forged window of more records than that cannot hold the
// verifier's memory, and a flipped byte in the record past the bound is
// found at that record, before any claim.
func TestTSPassDeferredRecordsAreBounded(t *testing.T) {
	n := maxDeferred + 1
	content := strings.Repeat("a", n-1) + "b" // the last record's byte flipped
	p, read := passOver(t, content)
	a := hexSum("a")
	for i := range n {
		p.data(dataClaim{seq: int64(i + 1), off: int64(i), len: 1, sha: a})
	}
	if len(p.deferred) != maxDeferred {
		t.Errorf("%d records wait for a claim, want the bound %d", len(p.deferred), maxDeferred)
	}
	wantFindings(t, p, Anomaly{Kind: KindDataDigestMismatch, File: vocab.TypescriptFile, Seq: int64(n), Offset: int64(n - 1), End: int64(n),
		Expected: a, Actual: hexSum("b"), Msg: fmt.Sprintf("bytes %d..%d differ from the recorded digest", n-1, n)})
	if *read != int64(n) {
		t.Errorf("%d bytes read for a %d-byte typescript, want each once", *read, n)
	}
}

// A prefix claim that matches while every data record before it does
// not explain the damage (bytes past the last record differ: the trailer
// line, say) is evidence only once a later trusted signature covers the
// claim's record: covered(3) (the claim's own checkpoint, whose signature
// covers the records before it, not its own attributes) reports nothing;
// covered(4) reports the bytes past the last record.
func TestTSPassUnexplainedPrefixDamageNeedsALaterSignature(t *testing.T) {
	trailer := "Script done\n"
	content := passHeader + passRec1 + "Script dOne\n"
	p, _ := passOver(t, content)
	p.header(15, hexSum(passHeader))
	p.data(dataClaim{seq: 1, off: 15, len: 7, sha: hexSum(passRec1)})
	p.claim(3, int64(len(content)), hexSum(passHeader+passRec1+trailer))
	p.covered(3)
	wantFindings(t, p)
	p.covered(4)
	wantFindings(t, p, Anomaly{Kind: KindFileDigestMismatch, File: vocab.TypescriptFile, Seq: 3, Offset: 22, End: 34,
		Expected: hexSum(passHeader + passRec1 + trailer), Actual: hexSum(content), Msg: "bytes 22..34 differ from the digest record 3 vouches for (no data record covers them)"})
}

// The forgery a checkpoint's signature leaves open: it covers the records
// before it, never its own attributes, so the last checkpoint's prefix
// claim can be rewritten to match a flipped byte. Until a later signature
// covers it (covered(4)), the claim vouches for nothing: covered(3) keeps
// its window, and finish() re-checks the records one by one and finds
// the byte. Once covered(4), the honest-looking claim is evidence and
// finish() has nothing to re-check.
func TestTSPassOwnClaimIsNotCoveredByItsOwnSignature(t *testing.T) {
	forged := passHeader + "hellO\r\n"
	for _, tc := range []struct {
		covered int64
		windows int
		want    []Anomaly
	}{
		{3, 1, []Anomaly{{Kind: KindDataDigestMismatch, File: vocab.TypescriptFile, Seq: 1, Offset: 15, End: 22,
			Expected: hexSum(passRec1), Actual: hexSum(forged[15:]), Msg: "bytes 15..22 differ from the recorded digest"}}},
		{4, 0, nil},
	} {
		p, _ := passOver(t, forged)
		p.header(15, hexSum(passHeader))
		p.data(dataClaim{seq: 1, off: 15, len: 7, sha: hexSum(passRec1)})
		p.claim(3, 22, hexSum(forged))
		p.covered(tc.covered)
		if len(p.windows) != tc.windows {
			t.Errorf("covered(%d): %d windows left to re-check, want %d", tc.covered, len(p.windows), tc.windows)
		}
		p.finish()
		wantFindings(t, p, tc.want...)
	}
}
