package evidence_test

import (
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// emptyPcap is the packet witness's file on a volume that refused its
// first write: the file was made, nothing reached it, and its record
// says so (0 bytes, the empty digest) and counts claimed packets.
func emptyPcap(claimed int64) oneFileWitness {
	return oneFileWitness{class: vocab.ClassPcap, state: vocab.PcapOn, name: "capture-000001.pcapng",
		fileType: vocab.TypePcapFile, countAttr: vocab.AttrPackets,
		stateAttr: vocab.AttrPcap, filesAttr: vocab.AttrPcapFiles, count: claimed}
}

// TestEmptyWitnessFileHoldsNothing: a witness file nothing reached (a
// full volume refused its first write) holds no packets and no records,
// which is what its record says; an empty file has no header to parse,
// and reading one as a damaged pcapng made a full disk verify tampered.
func TestEmptyWitnessFileHoldsNothing(t *testing.T) {
	for _, w := range []oneFileWitness{emptyPcap(0), auditLines("")} {
		t.Run(w.class, func(t *testing.T) {
			rep := evidence.Verify(recordWith(t, w, nil), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
			if !rep.OK() || len(rep.Anomalies) > 0 {
				t.Fatalf("an empty %s file its record counts as empty: OK=%v anomalies %v", w.class, rep.OK(), rep.Anomalies)
			}
		})
	}
	rep := evidence.Verify(recordWith(t, emptyPcap(0), nil), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	if rep.Pcap == nil || rep.Pcap.Files != 1 || rep.Pcap.Packets != 0 {
		t.Fatalf("pcap report %+v, want one vouched-for file of 0 packets", rep.Pcap)
	}
}

// TestEmptyWitnessFileClaimedFull: a record that counts packets in a file
// of no bytes is a count mismatch, so the empty case is not a way around
// the count.
func TestEmptyWitnessFileClaimedFull(t *testing.T) {
	rep := evidence.Verify(recordWith(t, emptyPcap(3), nil), evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	if rep.OK() {
		t.Fatal("a record counting 3 packets in an empty file verified OK")
	}
	found := false
	for _, a := range rep.Anomalies {
		found = found || a.Kind == evidence.KindCountMismatch
	}
	if !found {
		t.Fatalf("anomalies %v, want a %s", rep.Anomalies, evidence.KindCountMismatch)
	}
}
