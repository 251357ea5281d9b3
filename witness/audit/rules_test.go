package audit

import (
	"slices"
	"strings"
	"testing"
)

func TestParseRulesLabFile(t *testing.T) {
	rs, err := ParseRules(strings.NewReader(`# lab
-D
-b 8192
--backlog_wait_time 60000

-a always,exit -F arch=b64 -S execve,execveat -k aptl_exec
-a exit,always -F arch=b32 -S execve -k aptl_exec
-a always,exit -F arch=b64 -S connect -F auid>=1000 -F success=1 -k aptl_net
-a always,exit -F arch=b64 -S openat -F exit=-13 -F auid!=unset
-w /home/kali -p wa -k aptl_home
`), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	if !rs.DeleteAll || rs.Backlog != 8192 || len(rs.Rules) != 5 || len(rs.Warnings) != 2 {
		t.Fatalf("got %+v", rs)
	}
	exec64, exec32, net, open, watch := rs.Rules[0], rs.Rules[1], rs.Rules[2], rs.Rules[3], rs.Rules[4]
	if !slices.Equal(exec64.Syscalls, []int{59, 322}) || !slices.Equal(exec32.Syscalls, []int{11}) || exec64.Key != "aptl_exec" {
		t.Errorf("exec rules: %+v %+v", exec64, exec32)
	}
	if exec32.Fields[0] != (Field{ID: fieldArch, Op: opEqual, Value: archI386}) || exec64.Where != "lab.rules:6" {
		t.Errorf("exec32 arch field %+v, where %q", exec32.Fields[0], exec64.Where)
	}
	wantNet := []Field{{ID: fieldArch, Op: opEqual, Value: archX8664}, {ID: fieldLoginUID, Op: opGreaterEq, Value: 1000}, {ID: fieldSuccess, Op: opEqual, Value: 1}}
	if !slices.Equal(net.Fields, wantNet) {
		t.Errorf("connect fields %+v, want %+v", net.Fields, wantNet)
	}
	// auid unset is the kernel's loginuid_set field: a uid of -1 is invalid to it.
	if open.Fields[1] != (Field{ID: fieldExit, Op: opEqual, Value: uint32(0xfffffff3)}) || open.Fields[2] != (Field{ID: fieldLoginUIDSet, Op: opEqual, Value: 1}) {
		t.Errorf("openat fields %+v", open.Fields)
	}
	if watch.Watch != "/home/kali" || watch.Syscalls != nil || watch.Fields[0] != (Field{ID: fieldPerm, Op: opEqual, Value: permWrite | permAttr}) {
		t.Errorf("watch %+v", watch)
	}
}

func TestParseRulesRefusesWithLine(t *testing.T) {
	for _, c := range []struct{ rule, want string }{
		{"-e 2", `lab.rules:2: unsupported option "-e"`},
		{"-a always,task -S execve", "only the exit and io_uring lists"},
		{"-a always,exit -F arch=b64 -S bogus", "-S bogus: syscall not known"},
		{"-a always,exit -F arch=arm -S execve", "unsupported architecture"},
		{"-a always,exit -S execve -F subj_type=x", `unsupported field "subj_type"`},
		{"-a always,exit -S execve -F uid=root", "names are not resolved"},
		{"-a always,exit -S execve -k", "-k needs a value"},
		{"-w relative/path -p wa", "must be absolute"},
		{"-w /x -p q", "permissions are r, w, x and a"},
		{"-w /x -S execve", "-w takes -p, -k and -F only"},
		{"-a always,exit -S execve -p w", "-p belongs to -w rules"},
		{"-b many", "not a number"},
		{"-S execve", `unsupported option "-S"`},
	} {
		_, err := ParseRules(strings.NewReader("# first\n"+c.rule+"\n"), "lab.rules")
		if err == nil || !strings.Contains(err.Error(), "lab.rules:2") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want lab.rules:2 and %q", c.rule, err, c.want)
		}
	}
}

func TestRuleDataRoundTrip(t *testing.T) {
	rs, err := ParseRules(strings.NewReader("-a always,exit -F arch=b64 -S execve,connect -F ses=7 -k aptl_exec\n-w /tmp/x -p w -k w\n"), "r")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs.Rules {
		d := r.kernelForm()
		back, err := unmarshalRuleData(d.marshal())
		if err != nil || !d.sameRule(back) || back.key() != r.Key {
			t.Errorf("%s: round trip %v: %+v != %+v", r.Where, err, back, d)
		}
		if !slices.Contains(back.fields, scopeField) {
			t.Errorf("%s: the scope field is missing", r.Where)
		}
	}
	// The kernel's class bits at the top of the mask do not matter.
	d := rs.Rules[1].kernelForm()
	k := d
	k.mask[bitmaskWords-1] &^= 1 << 31
	if !d.sameRule(k) {
		t.Error("class bits made two equal rules differ")
	}
	k.mask[0] &^= 1
	if d.sameRule(k) {
		t.Error("a syscall bit did not count")
	}
	if _, err := unmarshalRuleData(d.marshal()[:100]); err == nil {
		t.Error("a short rule decoded")
	}
}

func FuzzParseRules(f *testing.F) {
	f.Add("-a always,exit -F arch=b64 -S execve -k aptl_exec\n-w /home -p wa\n-b 10\n")
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := ParseRules(strings.NewReader(s), "f")
		if err != nil {
			return
		}
		for _, r := range rs.Rules {
			d := r.kernelForm()
			back, err := unmarshalRuleData(d.marshal())
			if err != nil || !d.sameRule(back) {
				t.Fatalf("%q: does not round-trip: %v", s, err)
			}
		}
	})
}

// TestSampleRulesParse: the sample the README points to loads as written.
func TestSampleRulesParse(t *testing.T) {
	rs, err := ParseRulesFile("../../docs/audit-lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Rules) != 6 || rs.Backlog != 8192 || !rs.DeleteAll || rs.Rules[4].Watch != "/home/kali" || !rs.Rules[5].URing {
		t.Errorf("sample rules: %+v", rs)
	}
	compose, err := ParseRulesFile("../../compose/capture/audit.rules")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range compose.Rules {
		if r.Watch != "" {
			t.Errorf("%s: a watch in the Compose pair's rules resolves in the relay's mount namespace", r.Where)
		}
	}
	if !slices.ContainsFunc(compose.Rules, func(r Rule) bool { return r.URing }) {
		t.Errorf("the Compose pair's rules lack the io_uring list: %+v", compose.Rules)
	}
}

// TestParseURingRules: the io_uring list in auditctl's syntax, and in
// the form `auditctl -l` lists it (-F key=, the operations joined): the
// operations are io_uring's numbers in the mask of the io_uring list
// (AUDIT_FILTER_URING_EXIT), with the witness's scope and the key.
func TestParseURingRules(t *testing.T) {
	written := "-a always,io_uring -S connect -S openat,openat2,accept,sendmsg,recvmsg -k aptl_uring\n"
	listed := "-a always,io_uring -S connect,openat,openat2,accept,sendmsg,recvmsg -F key=aptl_uring\n"
	swapped := "-a io_uring,always -S connect,openat,openat2,accept,sendmsg,recvmsg -k aptl_uring\n"
	var forms []ruleData
	for _, text := range []string{written, listed, swapped} {
		rs, err := ParseRules(strings.NewReader(text), "lab.rules")
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		r := rs.Rules[0]
		if !r.URing || !slices.Equal(r.Syscalls, []int{16, 18, 28, 13, 9, 10}) || r.Key != "aptl_uring" || len(r.Fields) != 0 {
			t.Fatalf("%q: %+v", text, r)
		}
		forms = append(forms, r.kernelForm())
	}
	d := forms[0]
	if d.flags != filterURingExit || d.mask[0] != 1<<16|1<<18|1<<28|1<<13|1<<9|1<<10 || d.mask[1] != 0 {
		t.Errorf("kernel form: flags %d mask %#x %#x", d.flags, d.mask[0], d.mask[1])
	}
	want := []Field{scopeField, {ID: fieldFilterKey, Op: opEqual, Value: 10, Text: "aptl_uring"}}
	if !slices.Equal(d.fields, want) {
		t.Errorf("kernel form fields %+v, want %+v", d.fields, want)
	}
	for i := range forms[1:] {
		if !forms[i+1].equal(d) {
			t.Errorf("form %d differs from the written one", i+1)
		}
	}
	// The exit list's rule with the same numbers is another rule.
	if exit := (Rule{Syscalls: []int{16}}).kernelForm(); exit.flags != filterExit || exit.sameRule(d) {
		t.Errorf("an exit rule taken for an io_uring one")
	}
	for _, c := range []struct{ rule, want string }{
		{"-a always,io_uring -S connect -F arch=b64", "-F arch does not apply to io_uring rules"},
		{"-a always,io_uring -S execve", "-S execve: io_uring operation not known"},
		{"-a always,io_uring,exit -S connect", "only the exit and io_uring lists"},
		{"-a never,io_uring -S openat", ""},
		{"-a always,io_uring", ""},
	} {
		rs, err := ParseRules(strings.NewReader(c.rule), "lab.rules")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.rule, err)
		case c.want == "" && !rs.Rules[0].URing:
			t.Errorf("%q: not an io_uring rule", c.rule)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want %q", c.rule, err, c.want)
		}
	}
}

// TestParseRulesAtTheirBounds: what auditctl takes at the edges of each
// bound, and the first value past it. A lab's rules file that the witness
// reads differently from auditctl would record something else than the
// lab asked for.
func TestParseRulesAtTheirBounds(t *testing.T) {
	fields := func(n int) string { return strings.Repeat(" -F uid=1", n) }
	for _, c := range []struct {
		name, rule string
		want       string // "" when the rule is taken
	}{
		{"a path of maxPathLen bytes", "-w /" + strings.Repeat("p", maxPathLen-1), ""},
		{"a path one byte longer", "-w /" + strings.Repeat("p", maxPathLen), "at most 4096 bytes"},
		{"a key of maxKeyLen bytes", "-a always,exit -S execve -k " + strings.Repeat("k", maxKeyLen), ""},
		{"a key one byte longer", "-a always,exit -S execve -k " + strings.Repeat("k", maxKeyLen+1), "a key is 1 to 256 bytes"},
		// The arch field auditctl adds, these, and the witness's three.
		{"maxFields in the kernel", "-a always,exit -S execve" + fields(maxFields-4), ""},
		{"one field more", "-a always,exit -S execve" + fields(maxFields-3), "too many -F fields"},
		{"the smallest exit code", "-a always,exit -S openat -F exit=-2147483648", ""},
		{"below it", "-a always,exit -S openat -F exit=-2147483649", "want a number"},
		{"the largest 32-bit value", "-a always,exit -S execve -F pid=4294967295", ""},
		{"above it", "-a always,exit -S execve -F uid=4294967296", "want a number"},
		{"uid 0", "-a always,exit -S execve -F uid=0", ""},
		{"a negative uid", "-a always,exit -S execve -F uid=-2", "want a number"},
		{"auid unset with =", "-a always,exit -S execve -F auid=unset", ""},
		{"auid unset with >=", "-a always,exit -S execve -F auid>=unset", "auid unset takes = or !="},
		{"ses unset", "-a always,exit -S execve -F ses=unset", ""},
		{"uid unset", "-a always,exit -S execve -F uid=unset", "names are not resolved"},
		{"an operator with no field", "-a always,exit -S execve -F !=5", `unsupported field "!"`},
	} {
		_, err := ParseRules(strings.NewReader(c.rule+"\n"), "lab.rules")
		if c.want == "" && err != nil {
			t.Errorf("%s: %v, want it taken", c.name, err)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestParseRulesFieldValues: the kernel values of the unset forms and of
// a rule without syscalls, which gets no arch field (auditctl adds the
// machine's arch only to syscall rules).
func TestParseRulesFieldValues(t *testing.T) {
	rs, err := ParseRules(strings.NewReader("-a always,exit -S execve -F auid=unset -F ses=unset\n-a always,exit -F auid>=1000\n"), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	want := []Field{{ID: fieldArch, Op: opEqual, Value: archX8664}, {ID: fieldLoginUIDSet, Op: opEqual, Value: 0}, {ID: fieldSessionID, Op: opEqual, Value: unsetID}}
	if !slices.Equal(rs.Rules[0].Fields, want) {
		t.Errorf("unset fields %+v, want %+v", rs.Rules[0].Fields, want)
	}
	if want := []Field{{ID: fieldLoginUID, Op: opGreaterEq, Value: 1000}}; !slices.Equal(rs.Rules[1].Fields, want) {
		t.Errorf("a rule without -S: fields %+v, want %+v and no arch", rs.Rules[1].Fields, want)
	}
}
