package examine

import (
	"strconv"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// AuditSessionReport is what the log says of the session's kernel audit
// session: its id and terminal, by which an examiner selects the session's
// audit records (`ses=`, `tty=`), or why it has none.
type AuditSessionReport struct {
	Ses    uint32 `json:"ses,omitempty"`
	TTY    string `json:"tty,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// noteAuditSession checks an audit-session record: one per log, with
// either an id the kernel can give (1 to 2^32-2) or a reason. A record
// that breaks this is an anomaly; the chain goes on (it still chains).
func (v *verifier) noteAuditSession(r *integrity.Record, seq, off int64) {
	if v.rep.AuditSession != nil {
		v.anomaly(KindChainBroken, vocab.LogFile, seq, off, "second %s record", vocab.TypeAuditSession)
		return
	}
	a := AuditSessionReport{TTY: r.Attrs[vocab.AttrAuditTTY], Reason: r.Attrs[vocab.AttrAuditSesReason]}
	if s, ok := r.Attrs[vocab.AttrAuditSes]; ok {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 || n == 1<<32-1 || strconv.FormatUint(n, 10) != s {
			v.anomaly(KindRecordMalformed, vocab.LogFile, seq, off, "%s record: %s is not an audit session id", vocab.TypeAuditSession, vocab.AttrAuditSes)
			return
		}
		a.Ses = uint32(n)
	} else if a.Reason == "" {
		v.anomaly(KindRecordMalformed, vocab.LogFile, seq, off, "%s record has neither %s nor %s", vocab.TypeAuditSession, vocab.AttrAuditSes, vocab.AttrAuditSesReason)
		return
	}
	v.rep.AuditSession = &a
}
