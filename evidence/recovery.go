package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// UnsignedRange names the records that chain but follow the last trusted
// checkpoint, "first-last", or "none".
func (r *Report) UnsignedRange() string {
	if r.SignedRecords >= r.Records {
		return "none"
	}
	return fmt.Sprintf("%d-%d", r.SignedRecords, r.Records-1)
}

// checkRecovery reads the recovery file a restarted sidecar wrote for this
// unfinalized session, if any, and reports what it states. It must continue
// the chain from the last record that checks out and carry a trusted
// signature; the session stays unfinalized either way.
func (v *verifier) checkRecovery() {
	var lines []logLine
	err := readRecords(v.files, vocab.RecoveryFile, func(_ int, ln logLine) bool {
		lines = append(lines, ln)
		return len(lines) <= 2
	})
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		v.anomaly(KindRecoveryInvalid, vocab.RecoveryFile, -1, -1, "%v", err)
		return
	}
	if len(lines) != 2 || !lines[0].complete || !lines[1].complete {
		v.anomaly(KindRecoveryInvalid, vocab.RecoveryFile, -1, -1, "recovery file is not one recovery record and one checkpoint")
		return
	}
	var rec, cp integrity.Record
	if json.Unmarshal(lines[0].text, &rec) != nil || json.Unmarshal(lines[1].text, &cp) != nil {
		v.anomaly(KindRecoveryInvalid, vocab.RecoveryFile, -1, -1, "recovery file does not parse")
		return
	}
	seq := int64(v.rep.Records)
	sum := sha256.Sum256(lines[0].text)
	switch {
	case rec.Type != vocab.TypeRecovery || rec.Seq != uint64(seq) || rec.Prev != v.rep.ChainHead:
		v.anomaly(KindRecoveryInvalid, vocab.RecoveryFile, seq, 0, "recovery record does not continue the chain after record %d", seq-1)
		return
	case cp.Type != vocab.TypeCheckpoint || cp.Prev != hex.EncodeToString(sum[:]):
		v.anomaly(KindRecoveryInvalid, vocab.RecoveryFile, seq+1, lines[1].off, "recovery checkpoint does not follow the recovery record")
		return
	}
	pub, err := integrity.VerifySSHSIG(cp.Sig, integrity.HeadNamespace, integrity.HeadMessage(v.rep.RunID, v.rep.SessionID, rec.Seq, cp.Prev))
	if err != nil {
		v.anomaly(KindRecoveryInvalid, vocab.RecoveryFile, seq+1, lines[1].off, "recovery checkpoint signature: %v", err)
		return
	}
	// The host key signs a session key's recovery only where the
	// statement says the session's key was gone at the restart.
	hostKeyStands := rec.Attrs[vocab.AttrSignerFallback] == vocab.FallbackKeyGone
	if _, why := v.untrustedSigner(pub, hostKeyStands); why != "" {
		v.anomaly(KindRecoveryInvalid, vocab.RecoveryFile, seq+1, lines[1].off, "recovery checkpoint %s", why)
		return
	}
	signedBy := ""
	if hostKeyStands && v.signer.cert != nil {
		signedBy = "; the statement is signed by the host key, the session's own key having been gone at the restart, so it is worth what the host key is"
	}
	// The recovery vouches for the log as it found it: a torn last line
	// it did not state, or stated otherwise, came after it.
	if stated, found := statedTorn(rec.Attrs), tornAttrs(v.rep.TornLog); stated != found {
		v.anomaly(KindRecoveryInvalid, vocab.LogFile, seq, 0, "the recovery record states the log's torn last line as %s; the log ends in %s", stated, found)
		return
	}
	v.recovery, v.recoverySigner = &rec, pub
	v.anomaly(KindRecovered, vocab.RecoveryFile, seq, 0, "the sidecar restarted on %s before finalizing; %s; %s%s",
		rec.Time.Format(time.RFC3339), unaccountedStatement(rec.Attrs), v.unsignedStatement(rec.Attrs[vocab.AttrUnsignedRecords]), signedBy)
}

// statedTorn and tornAttrs put a recovery record's statement of the
// log's torn last line and the one the verifier found in one form.
func statedTorn(a map[string]string) string {
	if a[vocab.AttrLogTornOff] == "" && a[vocab.AttrLogTornLen] == "" && a[vocab.AttrLogTornSHA256] == "" {
		return "none"
	}
	return fmt.Sprintf("%s bytes at offset %s (sha256 %s)", a[vocab.AttrLogTornLen], a[vocab.AttrLogTornOff], a[vocab.AttrLogTornSHA256])
}

func tornAttrs(t *TornLine) string {
	if t == nil {
		return "none"
	}
	return fmt.Sprintf("%d bytes at offset %d (sha256 %s)", t.Len, t.Off, t.SHA256)
}

// unaccountedStatement repeats what the recovery found past the log's
// data records, and which file tails it did not read, and why.
func unaccountedStatement(a map[string]string) string {
	var parts []string
	if stated := statedTorn(a); stated != "none" {
		parts = append(parts, "the log's last line is a record cut mid-write, "+stated)
	}
	if a[vocab.AttrUnaccountedLen] != "" {
		parts = append(parts, fmt.Sprintf("%s typescript bytes from offset %s are not covered by the log (sha256 %s)",
			a[vocab.AttrUnaccountedLen], a[vocab.AttrUnaccountedOff], a[vocab.AttrUnaccountedSHA256]))
	}
	if notRead := a[vocab.AttrNotRead]; notRead != "" {
		parts = append(parts, "the restarted sidecar did not read the "+notRead)
	}
	return strings.Join(parts, "; ")
}

// unsignedStatement says which records the recovery signed without any
// checkpoint having covered them before the crash, checked against what
// the verifier found itself.
func (v *verifier) unsignedStatement(claimed string) string {
	found := v.rep.UnsignedRange()
	switch {
	case claimed == "":
		return fmt.Sprintf("the recovery record does not say which records were unsigned before the crash (the log shows %s)", found)
	case claimed != found:
		return fmt.Sprintf("the recovery record says records %s were unsigned before the crash, but the log shows %s", claimed, found)
	case found == "none":
		return "every record was signed before the crash"
	}
	return fmt.Sprintf("records %s were not signed before the crash: the restarted sidecar signed them as found, and anyone with write access to the volume could have appended them", found)
}
