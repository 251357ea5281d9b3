package evidence_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// miscounted is a witness whose close record states files files, whatever
// it wrote.
type miscounted struct {
	oneFileWitness
	files string
}

func (m miscounted) Open(wo recorder.WitnessOpen) (recorder.Witness, map[string]string) {
	w, attrs := m.oneFileWitness.Open(wo)
	return miscountedRun{w, m}, attrs
}

type miscountedRun struct {
	recorder.Witness
	m miscounted
}

func (r miscountedRun) Close(emit recorder.Emit) (map[string]string, error) {
	attrs, err := r.Witness.Close(emit)
	attrs[r.m.filesAttr] = r.m.files
	return attrs, err
}

// recordSeq is the seq of the first record of type typ in dir's log.
func recordSeq(t *testing.T, dir, typ string) int64 {
	t.Helper()
	for i, line := range logLines(t, dir) {
		var r integrity.Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		if r.Type == typ {
			return int64(i)
		}
	}
	t.Fatalf("no %s record", typ)
	return -1
}

// A finalized session whose close record counts two audit files while
// one signed record vouches for one (a file and its record removed, say):
// the close record's count is the finding, at the close record.
func TestCloseCountsMoreWitnessFilesThanSigned(t *testing.T) {
	dir := recordWith(t, miscounted{auditLines(syscallLine(1, "pts3", "7")), "2"}, nil)
	rep := verify(dir, recordertest.Signer().PublicKey())
	exactly(t, rep, evidence.Anomaly{Kind: evidence.KindCountMismatch, File: vocab.LogFile, Seq: recordSeq(t, dir, vocab.TypeClose), Offset: -1, End: -1,
		Expected: "2", Actual: "1", Msg: fmt.Sprintf("close record counts 2 %s files, the signed %s records 1", vocab.AuditDir, vocab.TypeAuditFile)})
}

// A pcap file's record counting packets its file does not hold: the
// finding names the file and the record, and no offset (the count is the
// file's as a whole).
func TestWitnessFileCountConcernsNoOffset(t *testing.T) {
	dir := recordWith(t, emptyPcap(3), nil)
	rep := verify(dir, recordertest.Signer().PublicKey())
	seq := recordSeq(t, dir, vocab.TypePcapFile)
	exactly(t, rep, evidence.Anomaly{Kind: evidence.KindCountMismatch, File: vocab.PcapDir + "/capture-000001.pcapng", Seq: seq, Offset: -1, End: -1,
		Expected: "3", Actual: "0", Msg: fmt.Sprintf("holds 0 packets (<nil>), record %d counts 3", seq)})
}

// A session closing now: its recorder holds the log, which ends in the
// close record while the final checkpoint is being written. That is in
// progress, with no finding; not a close "not followed by exactly one
// signed checkpoint".
func TestClosingSessionIsInProgress(t *testing.T) {
	dir := finalized(t, recorder.Options{Signer: recordertest.Signer()})
	lines := logLines(t, dir)
	editFile(t, ptyFile(dir, vocab.LogFile), func([]byte) []byte { return bytes.Join(lines[:len(lines)-1], nil) })
	log, err := os.Open(ptyFile(dir, vocab.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if err := unix.Flock(int(log.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	rep := verify(dir, recordertest.Signer().PublicKey())
	if rep.Status != evidence.StatusInProgress || len(rep.Anomalies) != 0 || rep.Finalized {
		t.Errorf("status %s, finalized %v, findings %+v; want in progress, not finalized, none", rep.Status, rep.Finalized, rep.Anomalies)
	}
}
