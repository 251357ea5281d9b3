package evidence_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// Witness files of a cut session (Unfinalized), and what the report says
// of the witnesses.
//
// Lived mutants not killed, at a cost no unit test should pay (gremlins):
//   - witnessfiles.go:284 `maxWitnessEntries + 1` -> `- 1` and 288 `>` -> `>=`
//     differ only for a witness folder of 100000 entries or more: creating
//     that many files takes about 10 s here. Not equivalent.

// A witness the open record states (pcap unavailable, and why) is
// reported as stated, with no files; a witness the open record does not
// name (audit) is not reported at all.
func TestWitnessReportedAsTheOpenRecordStates(t *testing.T) {
	signer := recordertest.Signer()
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-p", "sess-p", signer,
		map[string]string{vocab.AttrPcap: vocab.PcapUnavailable, vocab.AttrPcapReason: "no CAP_NET_RAW"}, nil)
	rep := verify(dir, signer.PublicKey())
	if rep.Pcap == nil || *rep.Pcap != (evidence.PcapReport{State: vocab.PcapUnavailable, Reason: "no CAP_NET_RAW"}) || rep.Audit != nil {
		t.Errorf("pcap %+v, audit %+v; want pcap unavailable (no CAP_NET_RAW) and no audit report", rep.Pcap, rep.Audit)
	}
	if len(rep.Anomalies) != 1 || rep.Anomalies[0].Kind != evidence.KindUnfinalized {
		t.Errorf("findings %+v, want only %s", rep.Anomalies, evidence.KindUnfinalized)
	}
}

// A witness folder the witness made and never wrote into (it failed
// before its first file) is empty: nothing extra, nothing unreadable.
func TestEmptyWitnessFolder(t *testing.T) {
	signer := recordertest.Signer()
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-e", "sess-e", signer, nil, nil)
	if err := os.Mkdir(filepath.Join(dir, vocab.PcapDir), 0o700); err != nil {
		t.Fatal(err)
	}
	rep := verify(dir, signer.PublicKey())
	if len(rep.Anomalies) != 1 || rep.Anomalies[0].Kind != evidence.KindUnfinalized || rep.Pcap != nil {
		t.Errorf("findings %+v, pcap %+v; want only %s and no pcap report", rep.Anomalies, rep.Pcap, evidence.KindUnfinalized)
	}
}

// A sidecar that crashed while the audit witness wrote its file: the last
// checkpoint (record 5) names the file being written and vouches for its
// first line; the second was written after it. The file is the current
// one, not extra, and only its vouched-for prefix is compared: intact,
// the session is an honest cut; a byte flipped in that prefix is found.
func TestCurrentWitnessFileOfACutSession(t *testing.T) {
	const name = "audit-000001.log"
	first := "type=SYSCALL msg=audit(1764581000.123:1): arch=c000003e syscall=59 tty=pts3 ses=7\n"
	second := "type=EXECVE msg=audit(1764581000.123:1): argc=1 a0=\"id\"\n"
	sum := sha256.Sum256([]byte(first))
	for _, flipped := range []bool{false, true} {
		t.Run(fmt.Sprintf("flipped=%v", flipped), func(t *testing.T) {
			signer := recordertest.Signer()
			ts := []byte(recordertest.UnfinalizedHeader + recordertest.UnfinalizedBody)
			dir := recordertest.Unfinalized(t, t.TempDir(), "run-a", "sess-a", signer, map[string]string{vocab.AttrAudit: vocab.AuditOn},
				func(w *integrity.Writer) error {
					attrs := recordertest.PrefixAttrs(ts, []byte("O 0.100000 7\nO 0.100000 7\n"))
					attrs[vocab.AttrAuditFile], attrs[vocab.AttrAuditSize], attrs[vocab.AttrAuditSHA256] = name, strconv.Itoa(len(first)), hex.EncodeToString(sum[:])
					return w.Checkpoint(attrs)
				})
			content := []byte(first + second)
			if flipped {
				content[10] ^= 1
			}
			if err := os.Mkdir(filepath.Join(dir, vocab.AuditDir), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, vocab.AuditDir, name), content, 0o600); err != nil {
				t.Fatal(err)
			}
			rep := verify(dir, signer.PublicKey())
			if rep.LastVerifiedSeq != 5 || rep.Audit == nil || *rep.Audit != (evidence.AuditReport{State: vocab.AuditOn}) {
				t.Errorf("signed through %d, audit %+v; want 5 and audit on, no finished file", rep.LastVerifiedSeq, rep.Audit)
			}
			want := []evidence.Kind{evidence.KindUnfinalized}
			if flipped {
				want = []evidence.Kind{evidence.KindUnfinalized, evidence.KindFileDigestMismatch}
				if got := anomaliesOf(rep, evidence.KindFileDigestMismatch); len(got) != 1 || got[0] != (evidence.Anomaly{
					Kind: evidence.KindFileDigestMismatch, File: vocab.AuditDir + "/" + name, Seq: 5, Offset: 0, End: int64(len(first)),
					Expected: hex.EncodeToString(sum[:]), Actual: sha256Hex(content[:len(first)]),
					Msg: fmt.Sprintf("bytes 0..%d differ from the digest record 5 vouches for (altered)", len(first))}) {
					t.Errorf("digest findings %+v, want one over the vouched-for %d bytes", got, len(first))
				}
			}
			if len(rep.Anomalies) != len(want) {
				t.Fatalf("findings %+v, want kinds %v", rep.Anomalies, want)
			}
			for i, k := range want {
				if rep.Anomalies[i].Kind != k {
					t.Errorf("finding %d %+v, want %s", i, rep.Anomalies[i], k)
				}
			}
		})
	}
}

// The current witness file of a cut session holding exactly what the
// last checkpoint vouches for (the crash came right after it), or the
// checkpoint naming a file it vouches for nothing of yet (0 bytes, the
// file just made, empty): an honest cut, nothing truncated.
func TestCurrentWitnessFileAtItsClaim(t *testing.T) {
	const name = "audit-000001.log"
	line := "type=SYSCALL msg=audit(1764581000.123:1): arch=c000003e syscall=59 tty=pts3 ses=7\n"
	for _, content := range []string{line, ""} {
		t.Run(fmt.Sprintf("%d bytes", len(content)), func(t *testing.T) {
			signer := recordertest.Signer()
			ts := []byte(recordertest.UnfinalizedHeader + recordertest.UnfinalizedBody)
			sum := sha256.Sum256([]byte(content))
			dir := recordertest.Unfinalized(t, t.TempDir(), "run-c", "sess-c", signer, map[string]string{vocab.AttrAudit: vocab.AuditOn},
				func(w *integrity.Writer) error {
					attrs := recordertest.PrefixAttrs(ts, []byte("O 0.100000 7\nO 0.100000 7\n"))
					attrs[vocab.AttrAuditFile], attrs[vocab.AttrAuditSize], attrs[vocab.AttrAuditSHA256] = name, strconv.Itoa(len(content)), hex.EncodeToString(sum[:])
					return w.Checkpoint(attrs)
				})
			if err := os.Mkdir(filepath.Join(dir, vocab.AuditDir), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, vocab.AuditDir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			rep := verify(dir, signer.PublicKey())
			if len(rep.Anomalies) != 1 || rep.Anomalies[0].Kind != evidence.KindUnfinalized {
				t.Errorf("findings %+v, want only %s", rep.Anomalies, evidence.KindUnfinalized)
			}
		})
	}
}
