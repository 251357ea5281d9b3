package evidence

import (
	"slices"
	"testing"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestWitnessCollectsOnlyItsOwnGaps: a witness takes the count of the gap
// records of its own stream (packets not stored), and no other gap's: a
// count on a gap of another stream is not its.
func TestWitnessCollectsOnlyItsOwnGaps(t *testing.T) {
	w := &witnessEvidence{class: pcapClass}
	v := newTestVerifier()
	w.collect(v, &integrity.Record{Type: vocab.TypeGap, Attrs: map[string]string{
		vocab.AttrReason: vocab.GapPcapKernelDrops, vocab.AttrStream: vocab.StreamPcap, vocab.AttrCount: "3"}}, 4)
	w.collect(v, &integrity.Record{Type: vocab.TypeGap, Attrs: map[string]string{
		vocab.AttrReason: vocab.GapAuditLost, vocab.AttrStream: vocab.StreamAudit, vocab.AttrCount: "5"}}, 6)
	want := []Gap{{Seq: 4, Reason: vocab.GapPcapKernelDrops, Stream: vocab.StreamPcap, Count: 3}}
	if !slices.Equal(w.gaps, want) {
		t.Errorf("pcap witness gaps %+v, want %+v", w.gaps, want)
	}
}
