package evidence

import (
	"strconv"
	"testing"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

func newTestVerifier() *verifier {
	return &verifier{rep: &Report{LastVerifiedSeq: -1, LastVerifiedOffset: -1}, closeSeq: -1}
}

// TestUnsignedBounds: a data record may reach exactly MaxUnsignedTail
// past the last trusted checkpoint, and no byte further (that one is a
// finding naming the record, not a byte range); before any checkpoint
// the bound counts from the header line's end, and a checkpoint at
// offset 0 counts from 0. A file tail of exactly its bound past the
// signed size is within it; one byte more is damage over that tail.
func TestUnsignedBounds(t *testing.T) {
	v := newTestVerifier()
	v.headerLen = 50
	if got := v.signedStart(); got != 50 {
		t.Errorf("no checkpoint: the unsigned tail starts at %d, want the header's end 50", got)
	}
	v.rep.LastVerifiedOffset = 0
	if got := v.signedStart(); got != 0 {
		t.Errorf("a checkpoint at offset 0: the unsigned tail starts at %d, want 0", got)
	}
	v.rep.LastVerifiedOffset = 100
	if !v.withinUnsignedBound(100, MaxUnsignedTail, 7, 900) || len(v.rep.Anomalies) != 0 {
		t.Fatalf("a record ending exactly MaxUnsignedTail past the checkpoint was refused: %v", v.rep.Anomalies)
	}
	if v.withinUnsignedBound(100, MaxUnsignedTail+1, 7, 900) || len(v.rep.Anomalies) != 1 {
		t.Fatalf("a record one byte past the bound was read: %v", v.rep.Anomalies)
	}
	if a := v.rep.Anomalies[0]; a.Kind != KindUnsignedTailTooLong || a.Seq != 7 || a.Offset != 900 || a.End != -1 {
		t.Errorf("the finding %+v, want %s at record 7, log offset 900, no byte range", a, KindUnsignedTailTooLong)
	}

	v = newTestVerifier()
	if !v.checkTail(vocab.TimingFile, 10+MaxUnsignedTimingTail, 10, MaxUnsignedTimingTail) || len(v.rep.Anomalies) != 0 {
		t.Fatalf("a tail of exactly its bound was refused: %v", v.rep.Anomalies)
	}
	if v.checkTail(vocab.TimingFile, 11+MaxUnsignedTimingTail, 10, MaxUnsignedTimingTail) || len(v.rep.Anomalies) != 1 {
		t.Fatalf("a tail one byte past its bound was accepted: %v", v.rep.Anomalies)
	}
	if a := v.rep.Anomalies[0]; a.File != vocab.TimingFile || a.Offset != 10 || a.End != 11+MaxUnsignedTimingTail {
		t.Errorf("the damage %+v, want %s bytes 10..%d", a, vocab.TimingFile, 11+MaxUnsignedTimingTail)
	}
	// Neither file open (unreadable or absent): nothing to bound, and the
	// timing file is not held back from its scan.
	if v := newTestVerifier(); !v.checkUnsignedTails() || len(v.rep.Anomalies) != 0 {
		t.Errorf("no files: checkUnsignedTails reported %v", v.rep.Anomalies)
	}
}

// TestSignedSizesFromZero: a checkpoint that states size 0 (nothing
// written yet) moves the signed sizes to 0; a size that does not parse,
// or is negative, leaves them as they were.
func TestSignedSizesFromZero(t *testing.T) {
	v := newTestVerifier()
	v.rep.SignedTSSize, v.rep.SignedTMSize = 5, 6
	v.noteSignedSizes(map[string]string{vocab.AttrTSSize: "0", vocab.AttrTMSize: "0"})
	if v.rep.SignedTSSize != 0 || v.rep.SignedTMSize != 0 {
		t.Errorf("sizes %d, %d after a checkpoint stating 0 and 0", v.rep.SignedTSSize, v.rep.SignedTMSize)
	}
	v.noteSignedSizes(map[string]string{vocab.AttrTSSize: "-1", vocab.AttrTMSize: "x"})
	if v.rep.SignedTSSize != 0 || v.rep.SignedTMSize != 0 {
		t.Errorf("sizes %d, %d after a checkpoint stating -1 and x", v.rep.SignedTSSize, v.rep.SignedTMSize)
	}
}

// TestProgressCountsOnlyBytes: progress is reported for bytes read, never
// for an empty read.
func TestProgressCountsOnlyBytes(t *testing.T) {
	calls := 0
	v := &verifier{opts: Options{Progress: func(int64) { calls++ }}}
	v.progress(0)
	v.progress(3)
	if calls != 1 {
		t.Errorf("%d progress calls for reads of 0 and 3 bytes, want 1", calls)
	}
}

// TestPlacementNotes: a session in <run>/<session> as serve writes it, or
// in a harvest's kali-side folder, gets no note; a renamed copy gets one
// for each folder whose name differs from the signed id.
func TestPlacementNotes(t *testing.T) {
	for _, tc := range []struct {
		dir   string
		notes []Kind
	}{
		{"/captures/run-1/sess-1", nil},
		{"/harvest/" + vocab.KaliSideDir + "/sess-1", nil},
		{"/captures/run-1/copy", []Kind{NoteFolderName}},
		{"/captures/elsewhere/sess-1", []Kind{NoteRunFolderName}},
		{"/captures/elsewhere/copy", []Kind{NoteFolderName, NoteRunFolderName}},
	} {
		v := newTestVerifier()
		v.rep.Dir, v.rep.RunID, v.rep.SessionID = tc.dir, "run-1", "sess-1"
		v.checkPlacement()
		var got []Kind
		for _, n := range v.rep.Notes {
			got = append(got, n.Kind)
		}
		if len(got) != len(tc.notes) || len(got) > 0 && got[0] != tc.notes[0] || len(got) > 1 && got[1] != tc.notes[1] {
			t.Errorf("%s: notes %v, want %v", tc.dir, got, tc.notes)
		}
	}
}

// TestReportStartsWithNothingVerified: a folder with no log reports no
// verified record, offset or chained offset (-1), never record 0.
func TestReportStartsWithNothingVerified(t *testing.T) {
	rep := Verify(t.TempDir(), Keys{}, Options{})
	if rep.LastVerifiedSeq != -1 || rep.LastVerifiedOffset != -1 || rep.ChainedOffset != -1 {
		t.Errorf("last verified %d at %d, chained to %d; want -1, -1, -1", rep.LastVerifiedSeq, rep.LastVerifiedOffset, rep.ChainedOffset)
	}
}

// TestOpenRecordHeaderLength: the typescript header length the open
// record claims is 1 to maxHeaderLen bytes; 0, a negative length and one
// byte past the bound are malformed.
func TestOpenRecordHeaderLength(t *testing.T) {
	for _, tc := range []struct {
		n  string
		ok bool
	}{{"1", true}, {strconv.Itoa(maxHeaderLen), true}, {"0", false}, {"-1", false}, {strconv.Itoa(maxHeaderLen + 1), false}, {"x", false}} {
		v := newTestVerifier()
		v.rep.Dir = "/captures/run-1/sess-1"
		r := &integrity.Record{Type: vocab.TypeOpen, Attrs: map[string]string{
			vocab.AttrRunID: "run-1", vocab.AttrSessionID: "sess-1", vocab.AttrFormat: vocab.Format, vocab.AttrHeaderLen: tc.n}}
		if got := v.checkOpen(r, 0); got != tc.ok || tc.ok && v.headerLen != mustAtoi(t, tc.n) {
			t.Errorf("header length %s: accepted %v (header %d), want %v: %v", tc.n, got, v.headerLen, tc.ok, v.rep.Anomalies)
		}
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
