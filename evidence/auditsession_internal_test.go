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

// TestAuditMovesFollowed: a LOGIN record that moved a process of the
// session (old-ses its own, res=1) to a newer audit session makes that
// session's records the session's, noted once; one that failed, came from
// another session, or goes to an older session does not, and the records
// of those sessions stay foreign; moves are bounded.
func TestAuditMovesFollowed(t *testing.T) {
	login := func(old, ses, res string) []byte {
		return []byte("audit(1.0:1): pid=9 uid=0 old-auid=1000 auid=0 tty=(none) old-ses=" + old + " ses=" + ses + " res=" + res)
	}
	for _, tc := range []struct {
		name    string
		records [][2][]byte // type, text
		foreign int
		notes   int
	}{
		{"a move and its records", [][2][]byte{{[]byte("LOGIN"), login("7", "8", "1")}, {[]byte("SYSCALL"), syscallRecord("pts0", "8")}}, 0, 1},
		{"a chain of moves", [][2][]byte{{[]byte("LOGIN"), login("7", "8", "1")}, {[]byte("LOGIN"), login("8", "9", "1")}, {[]byte("SYSCALL"), syscallRecord("pts0", "9")}}, 0, 2},
		{"a failed change", [][2][]byte{{[]byte("LOGIN"), login("7", "8", "0")}, {[]byte("SYSCALL"), syscallRecord("pts0", "8")}}, 2, 0},
		{"from another session", [][2][]byte{{[]byte("LOGIN"), login("5", "8", "1")}, {[]byte("SYSCALL"), syscallRecord("pts0", "8")}}, 2, 0},
		{"to an older session", [][2][]byte{{[]byte("LOGIN"), login("7", "6", "1")}, {[]byte("SYSCALL"), syscallRecord("pts0", "6")}}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newTestVerifier()
			v.rep.LastVerifiedSeq = 5
			v.rep.AuditSession = &AuditSessionReport{Ses: 7, TTY: "/dev/pts/0", seq: 1}
			read := v.auditTerms("audit/audit-000001.log")
			for i, r := range tc.records {
				read(r[0], r[1], int64(i))
			}
			foreign := 0
			for _, a := range v.rep.Anomalies {
				if a.Kind == KindAuditForeignSes {
					foreign++
				}
			}
			// The first foreign record of a file is reported, the rest counted.
			if (foreign > 0) != (tc.foreign > 0) || len(v.rep.Notes) != tc.notes {
				t.Errorf("foreign anomalies %d, notes %d (%v); want foreign %v, %d notes", foreign, len(v.rep.Notes), v.rep.Notes, tc.foreign > 0, tc.notes)
			}
		})
	}
	// Bounded: past maxMoves, a move is not followed.
	v := newTestVerifier()
	v.rep.LastVerifiedSeq = 5
	v.rep.AuditSession = &AuditSessionReport{Ses: 7, seq: 1}
	read := v.auditTerms("audit/audit-000001.log")
	for i := range maxMoves + 1 {
		read([]byte("LOGIN"), login(fmt.Sprint(7+i), fmt.Sprint(8+i), "1"), int64(i))
	}
	if len(v.terms.moved) != maxMoves {
		t.Errorf("%d moves followed, want the bound %d", len(v.terms.moved), maxMoves)
	}
}
