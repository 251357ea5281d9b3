package evidence_test

import (
	"os"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// TestTimingLineNoClaimCovers: a line appended to a cut session's timing
// file, past what any signed claim covers, that is no line the recorder
// writes is a malformed-timing finding that names the line's offset and
// no record; the claimed lines before it stay good.
func TestTimingLineNoClaimCovers(t *testing.T) {
	signer := recordertest.Signer()
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-m", "sess-m", signer, nil, nil)
	tm := ptyFile(dir, vocab.TimingFile)
	before, err := os.ReadFile(tm)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tm, append(before, "X 0.100000 junk\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := verify(dir, signer.PublicKey())
	found := anomaliesOf(rep, evidence.KindTimingMalformed)
	if len(found) != 1 {
		t.Fatalf("malformed-timing findings %v, want one: %s %v", found, rep.Status, rep.Anomalies)
	}
	if a := found[0]; a.File != vocab.TimingFile || a.Seq != -1 || a.Offset != int64(len(before)) {
		t.Errorf("the finding points at %s record %d offset %d, want %s no record (-1) offset %d", a.File, a.Seq, a.Offset, vocab.TimingFile, len(before))
	}
}
