package evidence_test

import (
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// TestAuditSessionIDEdges: the audit session id a session is bound to is
// the kernel's, 1 to 2^32-2; 0 and 2^32-1 (AUDIT_SID_UNSET, "no session")
// are not ids, and a record that names one is malformed rather than a
// binding the audit cross-check would trust.
func TestAuditSessionIDEdges(t *testing.T) {
	for _, tc := range []struct {
		ses uint32
		ok  bool
	}{{1, true}, {1<<32 - 2, true}, {0, false}, {1<<32 - 1, false}} {
		dir := recordWith(t, auditLines(""), func(s *recorder.Session) error { return s.BindAuditSession(tc.ses) })
		rep := verify(dir, recordertest.Signer().PublicKey())
		malformed := false
		for _, a := range rep.Anomalies {
			malformed = malformed || a.Kind == evidence.KindRecordMalformed && strings.Contains(a.Msg, "is not an audit session id")
		}
		switch {
		case tc.ok && (malformed || rep.AuditSession == nil || rep.AuditSession.Ses != tc.ses):
			t.Errorf("audit session %d: refused or not bound: %+v %v", tc.ses, rep.AuditSession, rep.Anomalies)
		case !tc.ok && (!malformed || rep.Status != evidence.StatusTampered):
			t.Errorf("audit session %d: %s, %v; want the record refused as malformed", tc.ses, rep.Status, rep.Anomalies)
		}
	}
}
