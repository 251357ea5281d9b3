package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// budgetRunPercent is the run budget the test sets: 10% of the
// diskFillVolumeMiB volume, 12.8 MiB, which the flood spends in well under
// a second, while the volume stays far above its low mark (the disk
// states never move, so every gap is the budget's).
const budgetRunPercent = 10

// TestWitnessRunBudgetThroughServe: the witnesses' budget across the
// sessions of one run, through the built sidecar (local adapter, pcap on,
// the flood lab of the disk-fill test). A session floods UDP until its
// run's budget is spent: its transcript is whole, its record verifies ok,
// its pcap files stay within the budget, and the packets not stored are a
// pcap-budget gap, not a disk-low one, with no disk transition. A later
// session of the same run stores no packet and its record says why from
// its start (a spent budget stays spent); a session of another run stores
// its packets.
func TestWitnessRunBudgetThroughServe(t *testing.T) {
	skipUnlessFloodLab(t, "floods UDP for about 12 s")
	lab := newFloodLab(t, buildCommand(t), "APTL_CAPTURE_WITNESS_RUN_BUDGET_PERCENT="+strconv.Itoa(budgetRunPercent))
	budget := int64(diskFillVolumeMiB<<20) / 100 * budgetRunPercent

	f := startFlood(t, lab.login(t), "budget-flood", lab.peerAddr)
	f.waitReady(t)
	f.release(t)
	r := f.wait()
	if r.err != nil {
		t.Fatalf("the flood session: %v", r.err)
	}
	if lost := checkFloodRecord(t, lab, r); lost != 0 {
		t.Errorf("%d bytes of transcript lost to the budget", lost)
	}
	dir := filepath.Join(lab.root, floodRun, r.id)
	ev := readDiskEvidence(t, dir)
	if !slices.Contains(ev.reasons, vocab.GapPcapBudget) || slices.Contains(ev.reasons, vocab.GapPcapDiskLow) {
		t.Errorf("the flood session's pcap gaps %v: want a %s gap and no %s one (the volume never went low)", ev.pcapGaps, vocab.GapPcapBudget, vocab.GapPcapDiskLow)
	}
	if len(ev.diskStates) != 0 {
		t.Errorf("disk transitions %v: the budget, not the volume, must have stopped the witness", ev.diskStates)
	}
	if stored := pcapBytes(t, dir); stored > budget || stored == 0 {
		t.Errorf("the flood session's pcap files hold %d bytes; want some, and at most the run budget of %d", stored, budget)
	} else {
		t.Logf("run budget %d bytes; the flood session's pcap files hold %d", budget, stored)
	}

	// Ten datagrams from a session of the same run, then of another run.
	send := fmt.Sprintf("perl -e '%s'; echo SENT_$((40+2))", udpPerl(lab.peerAddr, `for (1..10) { send(S, $p, 0, $d) }`))
	same := budgetSession(t, lab, floodRun, "budget-same-run", send)
	if ev := readDiskEvidence(t, same); !slices.Contains(ev.reasons, vocab.GapPcapBudget) {
		t.Errorf("a later session of the spent run: pcap gaps %v, want a %s gap", ev.pcapGaps, vocab.GapPcapBudget)
	}
	if rep := evidence.Verify(same, evidence.Keys{Trusted: []gossh.PublicKey{lab.hostKey}}, evidence.Options{}); rep.Pcap == nil || rep.Pcap.Packets != 0 {
		t.Errorf("a later session of the spent run stored packets: %+v", rep.Pcap)
	}
	other := budgetSession(t, lab, "budget-other", "budget-other-run", send)
	rep := evidence.Verify(other, evidence.Keys{Trusted: []gossh.PublicKey{lab.hostKey}}, evidence.Options{})
	if rep.Pcap == nil || rep.Pcap.Packets < 10 {
		t.Errorf("a session of another run: pcap %+v, want its 10 datagrams at least", rep.Pcap)
	}
	if ev := readDiskEvidence(t, other); len(ev.pcapGaps) != 0 {
		t.Errorf("a session of another run has pcap gaps %v: the budget is per run", ev.pcapGaps)
	}
	lab.checkStaysUp(t)
}

// budgetSession runs cmd in a session of run, requires its output to end
// with the SENT marker and its record to verify ok, and returns its folder.
func budgetSession(t *testing.T, lab *floodLab, run, id, cmd string) string {
	t.Helper()
	c := lab.login(t)
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for k, v := range map[string]string{"APTL_RUN_ID": run, "APTL_SESSION_ID": id} {
		if err := s.Setenv(k, v); err != nil {
			t.Fatalf("%s: setenv %s: %v", id, k, err)
		}
	}
	out, err := s.CombinedOutput(cmd)
	if err != nil || !strings.HasSuffix(string(out), "SENT_42\n") {
		t.Fatalf("%s: %v: %q", id, err, out)
	}
	dir := filepath.Join(lab.root, run, id)
	waitClosed(t, dir)
	// The packet witness files its last packets at close; the record is
	// closed once they are bound, so the verify below sees them.
	if rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{lab.hostKey}}, evidence.Options{}); rep.Status != evidence.StatusOK || !rep.Finalized {
		t.Errorf("%s: verify %s (finalized %v): %v", id, rep.Status, rep.Finalized, firstAnomalies(rep, 5))
	}
	return dir
}

// pcapBytes is the size of a session's pcap files.
func pcapBytes(t *testing.T, dir string) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, vocab.PcapDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, f := range files {
		fi, err := os.Lstat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}
