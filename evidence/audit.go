package evidence

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"regexp"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// The audit witness's files (<session>/audit/audit-NNNNNN.log), checked as
// every witness's files are (witnessfiles.go); a finished file's record
// counts its records: lines of auditd's log format, "type=<NAME> msg=audit(".

// AuditReport is what the record says of the session's audit records.
type AuditReport struct {
	State   string `json:"state"` // on, unavailable, disabled
	Reason  string `json:"reason,omitempty"`
	Files   int    `json:"files"`   // finished files a signed record vouches for
	Records int64  `json:"records"` // audit records in them
}

var auditClass = &witnessClass{
	dir: vocab.AuditDir, fileName: regexp.MustCompile(`^audit-[0-9]{6}\.log$`),
	fileType: vocab.TypeAuditFile, countAttr: vocab.AttrRecords,
	ckFile: vocab.AttrAuditFile, ckSize: vocab.AttrAuditSize, ckSHA256: vocab.AttrAuditSHA256,
	closeFiles: vocab.AttrAuditFiles, stream: vocab.StreamAudit,
	stateAttr: vocab.AttrAudit, reasonAttr: vocab.AttrAuditReason,
	missingKind: KindAuditMissing, extraKind: KindAuditExtra,
	count: func(v *verifier, rel string, r io.Reader) (int64, error) {
		return countAuditRecords(r, v.auditTerms(rel))
	},
}

func auditReport(w *witnessEvidence) *AuditReport {
	if w.rep == nil {
		return nil
	}
	return &AuditReport{State: w.rep.State, Reason: w.rep.Reason, Files: w.rep.Files, Records: w.rep.Count}
}

// maxAuditLine bounds one line of a hostile audit file (the kernel's
// records are far shorter).
const maxAuditLine = 1 << 16

var errAuditLine = errors.New("a line is not an audit record (type=<NAME> msg=audit(...))")

// countAuditRecords counts the records of an audit file the sidecar wrote,
// and hands each (its type name and its text, "audit(...): ...", and the
// line's offset) to learn when it is not nil.
func countAuditRecords(r io.Reader, learn func(typ, text []byte, off int64)) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxAuditLine)
	var n, off int64
	for sc.Scan() {
		line := sc.Bytes()
		name, rest, ok := bytes.Cut(line, []byte(" msg=audit("))
		if !ok || !bytes.HasPrefix(name, []byte("type=")) || len(rest) == 0 {
			return n, errAuditLine
		}
		if learn != nil {
			learn(name[len("type="):], line[len(name)+len(" msg="):], off)
		}
		n++
		off += int64(len(line)) + 1
	}
	return n, sc.Err()
}
