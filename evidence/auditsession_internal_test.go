package evidence

import (
	"fmt"
	"testing"
)

// syscallRecord is a SYSCALL record of audit session ses on terminal
// tty as the kernel writes it, with the fields the cross-check reads.
func syscallRecord(tty, ses string) []byte {
	return []byte("type=SYSCALL msg=audit(1764581000.123:1): arch=c000003e syscall=59 success=yes tty=" + tty + " ses=" + ses + ` comm="id"`)
}

// TestAuditTermsOnlyForASignedBinding: the audit files are read for the
// cross-check only when a trusted signature covers the audit-session
// record that binds the session to its ses: a record up to the last
// verified one is covered (as witnessfiles.go counts signed records);
// one after it (an unsigned tail anyone could write) is not.
func TestAuditTermsOnlyForASignedBinding(t *testing.T) {
	for _, tc := range []struct {
		seq  int64
		read bool
	}{{4, true}, {5, true}, {6, false}} {
		v := newTestVerifier()
		v.rep.LastVerifiedSeq = 5
		v.rep.AuditSession = &AuditSessionReport{Ses: 7, TTY: "/dev/pts/3", seq: tc.seq}
		if got := v.auditTerms("audit/audit-000001.log") != nil; got != tc.read {
			t.Errorf("audit-session record %d, signed through 5: read %v, want %v", tc.seq, got, tc.read)
		}
	}
}

// TestAuditTTYNamesBounded: a hostile audit file naming a new terminal in
// every record cannot grow the report without bound: the first
// maxTTYNames distinct names are kept, every later new name is counted
// under moreTTYs, and names already kept go on being counted.
func TestAuditTTYNamesBounded(t *testing.T) {
	v := newTestVerifier()
	v.rep.LastVerifiedSeq = 5
	v.rep.AuditSession = &AuditSessionReport{Ses: 7, TTY: "/dev/pts/3", seq: 1}
	read := v.auditTerms("audit/audit-000001.log")
	for i := range maxTTYNames + 2 {
		read([]byte("SYSCALL"), syscallRecord(fmt.Sprintf("pts%d", i), "7"), int64(i))
	}
	read([]byte("SYSCALL"), syscallRecord("pts0", "7"), 99)
	ttys := v.terms.ttys
	if len(ttys) != maxTTYNames+1 || ttys[moreTTYs] != 2 || ttys["pts0"] != 2 || ttys[fmt.Sprintf("pts%d", maxTTYNames-1)] != 1 || v.terms.syscalls != maxTTYNames+3 {
		t.Errorf("%d names (%v), %d syscalls; want %d names with %s counting 2, pts0 2, pts%d 1, and %d syscalls",
			len(ttys), ttys, v.terms.syscalls, maxTTYNames+1, moreTTYs, maxTTYNames-1, maxTTYNames+3)
	}
	if _, kept := ttys[fmt.Sprintf("pts%d", maxTTYNames)]; kept {
		t.Errorf("name %d of a bound of %d kept", maxTTYNames+1, maxTTYNames)
	}
}
