package evidence

import (
	"strings"
	"testing"
)

// TestCountAuditRecordsOffsets: each record reaches the cross-check with
// its type, its text from "audit(" on, and the offset its line starts at.
func TestCountAuditRecordsOffsets(t *testing.T) {
	first := "type=SYSCALL msg=audit(1764581000.123:1): ses=7 tty=pts3"
	second := "type=EXECVE msg=audit(1764581000.123:1): argc=1"
	var typs, texts []string
	var offs []int64
	n, err := countAuditRecords(strings.NewReader(first+"\n"+second+"\n"), func(typ, text []byte, off int64) {
		typs, texts, offs = append(typs, string(typ)), append(texts, string(text)), append(offs, off)
	})
	if err != nil || n != 2 {
		t.Fatalf("%d records, %v; want 2", n, err)
	}
	wantText := []string{first[len("type=SYSCALL msg="):], second[len("type=EXECVE msg="):]}
	if typs[0] != "SYSCALL" || typs[1] != "EXECVE" || texts[0] != wantText[0] || texts[1] != wantText[1] || offs[0] != 0 || offs[1] != int64(len(first)+1) {
		t.Errorf("types %q, texts %q at %v; want SYSCALL, EXECVE, %q at 0, %d", typs, texts, offs, wantText, len(first)+1)
	}
}

// TestTerminalsLine is the cross-check's line as verify prints it, in
// each of its forms.
func TestTerminalsLine(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name string
		a    AuditSessionReport
		want string
	}{
		{"no audit file read", AuditSessionReport{TTY: "/dev/pts/3"}, ""},
		{"own terminal and none", AuditSessionReport{TTY: "/dev/pts/3", SyscallRecords: 120, TTYs: map[string]int64{"pts3": 116, noTTY: 4}, OwnTTYSeen: &yes},
			"120 SYSCALL records ((none) 4, pts3 116): on the session's terminal or none"},
		{"no records", AuditSessionReport{TTY: "/dev/pts/3", TTYs: map[string]int64{}, OwnTTYSeen: &no},
			"0 SYSCALL records: none on the session's terminal"},
		{"another terminal", AuditSessionReport{TTY: "/dev/pts/3", SyscallRecords: 2, TTYs: map[string]int64{"pts3": 1, "pts9": 1}, OwnTTYSeen: &yes},
			"2 SYSCALL records (pts3 1, pts9 1): terminals other than the session's (see the note)"},
	} {
		if got := tc.a.Terminals(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if orNone("") != "(unknown)" || orNone("pts3") != "pts3" {
		t.Errorf("orNone: %q, %q", orNone(""), orNone("pts3"))
	}
}
