package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestDataRecordPlacement: stored data must start where the previous
// data ended (here 15, the header line's end), whatever its length: a
// record claiming the header's own bytes (offset 0), or a zero-length
// record elsewhere, is misplaced. Data counted but not stored (offset -1)
// of length 0 is a gap like any other. A length below 0 is no length the
// recorder writes: a malformed record, reported, never a silent end of
// the chain.
func TestDataRecordPlacement(t *testing.T) {
	for _, tc := range []struct {
		name     string
		typ      string
		off, len int64
		ok       bool
		want     []Anomaly
	}{
		{"data over the header line", vocab.TypeData, 0, 5, false, []Anomaly{{Kind: KindDataMisplaced, File: vocab.LogFile, Seq: 4, Offset: 900, End: -1,
			Expected: "15", Actual: "0", Msg: "data at typescript offset 0 where 15 belongs"}}},
		{"zero-length data elsewhere", vocab.TypeData, 3, 0, false, []Anomaly{{Kind: KindDataMisplaced, File: vocab.LogFile, Seq: 4, Offset: 900, End: -1,
			Expected: "15", Actual: "3", Msg: "data at typescript offset 3 where 15 belongs"}}},
		{"zero-length data in place", vocab.TypeData, 15, 0, true, nil},
		{"zero-length gap, not stored", vocab.TypeGap, -1, 0, true, nil},
		{"negative-length gap", vocab.TypeGap, -1, -1, false, []Anomaly{{Kind: KindRecordMalformed, File: vocab.LogFile, Seq: 4, Offset: 900, End: -1,
			Msg: "gap record claims -1 bytes"}}},
		{"negative-length data", vocab.TypeData, 15, -7, false, []Anomaly{{Kind: KindRecordMalformed, File: vocab.LogFile, Seq: 4, Offset: 900, End: -1,
			Msg: "data record claims -7 bytes"}}},
	} {
		v := newTestVerifier()
		v.headerLen, v.next = 15, 15
		r := &integrity.Record{Type: tc.typ, Data: &integrity.Data{Stream: vocab.StreamOut, Off: tc.off, Len: tc.len, SHA256: "00"}}
		if got := v.checkData(r, 4, 900); got != tc.ok || !slices.Equal(v.rep.Anomalies, tc.want) {
			t.Errorf("%s: chains %v, findings %+v; want %v, %+v", tc.name, got, v.rep.Anomalies, tc.ok, tc.want)
		}
	}
}

// TestEmptyFilesClaim: a checkpoint taken before anything was written
// states sizes 0 and the digests of nothing: a claim like any other, not
// a record lacking its sizes.
func TestEmptyFilesClaim(t *testing.T) {
	path := filepath.Join(t.TempDir(), vocab.TypescriptFile)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := newTestVerifier()
	v.tsPass = newTSPass(v, f, 0)
	empty := sha256.Sum256(nil)
	sum := hex.EncodeToString(empty[:])
	v.claimPrefixes(map[string]string{vocab.AttrTSSize: "0", vocab.AttrTSSHA256: sum, vocab.AttrTMSize: "0", vocab.AttrTMSHA256: sum}, 2)
	if len(v.rep.Anomalies) != 0 || !slices.Equal(v.tmClaims, []prefixClaim{{seq: 2, size: 0, sum: sum}}) {
		t.Errorf("findings %+v, timing claims %+v; want none and the claim on 0 bytes", v.rep.Anomalies, v.tmClaims)
	}
}

// TestUntrustedSignersListed: checkpoints signed by keys not given are
// all counted, and the first four distinct signers named (once each) in
// the finding; a fifth signer is counted, not named.
func TestUntrustedSignersListed(t *testing.T) {
	v := newTestVerifier()
	var want []string
	for i := range 5 {
		pub := testutil.NewSigner().PublicKey()
		v.noteUntrusted(pub)
		if i == 0 {
			v.noteUntrusted(pub) // the same signer again
		}
		if i < 4 {
			want = append(want, gossh.FingerprintSHA256(pub))
		}
	}
	if v.untrustedCount != 6 || !slices.Equal(v.untrustedSigners, want) {
		t.Errorf("%d counted, signers %v; want 6 and %v", v.untrustedCount, v.untrustedSigners, want)
	}
}

// TestPlacementOfTheCurrentFolder: verify run inside the session folder
// (".") names the folders it is in, as an absolute path would: no note.
func TestPlacementOfTheCurrentFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run-1", "sess-1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	v := newTestVerifier()
	v.rep.Dir, v.rep.RunID, v.rep.SessionID = ".", "run-1", "sess-1"
	v.checkPlacement()
	if len(v.rep.Notes) != 0 {
		t.Errorf("notes %+v for the session's own folder given as \".\"", v.rep.Notes)
	}
}

// TestUnsignedTailOfOpenFiles: a typescript or timing file that runs past
// the size the last trusted checkpoint states by more than its bound (a
// forger's sparse file) is stated, size and tail, without being read; a
// too-long timing file is not scanned either.
func TestUnsignedTailOfOpenFiles(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "file"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := newTestVerifier()
	v.rep.LastVerifiedSeq = 6
	v.ts, v.tsSize, v.rep.SignedTSSize = f, 100+MaxUnsignedTail+1, 100
	v.tm, v.tmSize, v.rep.SignedTMSize = f, 40+MaxUnsignedTimingTail+1, 40
	if v.checkUnsignedTails() {
		t.Error("a timing file past its bound is to be scanned")
	}
	want := []Anomaly{
		{Kind: KindUnsignedTailTooLong, File: vocab.TypescriptFile, Seq: 6, Offset: 100, End: 100 + MaxUnsignedTail + 1,
			Msg: fmt.Sprintf("file is %d bytes, %d past the 100 a trusted checkpoint vouches for: more than the %d bytes the sidecar writes unsigned; the tail is not read",
				100+MaxUnsignedTail+1, MaxUnsignedTail+1, MaxUnsignedTail)},
		{Kind: KindUnsignedTailTooLong, File: vocab.TimingFile, Seq: 6, Offset: 40, End: 40 + MaxUnsignedTimingTail + 1,
			Msg: fmt.Sprintf("file is %d bytes, %d past the 40 a trusted checkpoint vouches for: more than the %d bytes the sidecar writes unsigned; the tail is not read",
				40+MaxUnsignedTimingTail+1, MaxUnsignedTimingTail+1, MaxUnsignedTimingTail)},
	}
	if !slices.Equal(v.rep.Anomalies, want) {
		t.Errorf("findings\n %+v\nwant\n %+v", v.rep.Anomalies, want)
	}
}

// TestUnsignedRecordMessage: a data record reaching past the unsigned
// bound is stated with its own numbers: its length and offset, how far
// past the last trusted checkpoint it reaches, and where that lies.
func TestUnsignedRecordMessage(t *testing.T) {
	v := newTestVerifier()
	v.rep.LastVerifiedOffset = 100
	if v.withinUnsignedBound(150, MaxUnsignedTail, 7, 900) {
		t.Fatal("a record reaching MaxUnsignedTail+50 past the checkpoint was read")
	}
	want := fmt.Sprintf("data record claims %d typescript bytes at offset 150, reaching %d bytes past the last trusted checkpoint (offset 100): more than the %d the sidecar writes unsigned; not read",
		MaxUnsignedTail, MaxUnsignedTail+50, MaxUnsignedTail)
	if len(v.rep.Anomalies) != 1 || v.rep.Anomalies[0].Msg != want {
		t.Errorf("findings %+v, want one saying %q", v.rep.Anomalies, want)
	}
}
