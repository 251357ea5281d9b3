package audit

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// TestKernelFormMask: each syscall of a rule is its bit in the kernel's
// bitmap, word nr/32, bit nr%32; a rule without syscalls has every bit.
func TestKernelFormMask(t *testing.T) {
	d := Rule{Action: actionAlways, Syscalls: []int{0, 31, 32, 59, 63, 2047}}.kernelForm()
	want := map[int]uint32{0: 1 | 1<<31, 1: 1 | 1<<27 | 1<<31, 63: 1 << 31}
	for i, m := range d.mask {
		if m != want[i] {
			t.Errorf("mask word %d = %#x, want %#x", i, m, want[i])
		}
	}
	all := Rule{Action: actionAlways}.kernelForm()
	for i, m := range all.mask {
		if m != ^uint32(0) {
			t.Fatalf("a rule without syscalls: mask word %d = %#x, want all bits", i, m)
		}
	}
}

// TestKernelFormFields: the fields the witness loads are the watch (when
// the rule has one, as a dir field for a directory), the rule's own, the
// loginuid scope, then the key (when it has one); nothing else.
func TestKernelFormFields(t *testing.T) {
	own := Field{ID: 0, Op: opEqual, Value: 7}
	for _, tt := range []struct {
		name string
		rule Rule
		want []Field
	}{
		{"syscalls only", Rule{Fields: []Field{own}}, []Field{own, scopeField}},
		{"key", Rule{Key: "exec"}, []Field{scopeField, {ID: fieldFilterKey, Op: opEqual, Value: 4, Text: "exec"}}},
		{"watch", Rule{Watch: "/etc/shadow"}, []Field{{ID: fieldWatch, Op: opEqual, Value: 11, Text: "/etc/shadow"}, scopeField}},
		{"watched folder", Rule{Watch: "/etc", WatchDir: true}, []Field{{ID: fieldDir, Op: opEqual, Value: 4, Text: "/etc"}, scopeField}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.kernelForm().fields; fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("fields %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestRuleDataBounds: the decoder of the kernel's rule list takes exactly
// the header with nothing after it, and exactly maxFields fields and a
// buffer that ends where the message does; one byte short of the header,
// one field more, or a buffer length past the message is malformed.
func TestRuleDataBounds(t *testing.T) {
	ne := binary.NativeEndian
	head := make([]byte, ruleDataHead)
	if _, err := unmarshalRuleData(head); err != nil {
		t.Errorf("exactly the header: %v, want an empty rule", err)
	}
	if _, err := unmarshalRuleData(head[:ruleDataHead-1]); err != errRuleData {
		t.Errorf("a byte short of the header: %v, want %v", err, errRuleData)
	}
	full := make([]byte, ruleDataHead)
	ne.PutUint32(full[8:], maxFields)
	if d, err := unmarshalRuleData(full); err != nil || len(d.fields) != maxFields {
		t.Errorf("maxFields fields: %d fields, %v", len(d.fields), err)
	}
	ne.PutUint32(full[8:], maxFields+1)
	if _, err := unmarshalRuleData(full); err != errRuleData {
		t.Errorf("maxFields+1 fields: %v, want %v", err, errRuleData)
	}
	withBuf := append(make([]byte, ruleDataHead), "abc"...)
	ne.PutUint32(withBuf[ruleDataHead-4:], 3)
	if _, err := unmarshalRuleData(withBuf); err != nil {
		t.Errorf("a buffer that ends with the message: %v", err)
	}
	ne.PutUint32(withBuf[ruleDataHead-4:], 4)
	if _, err := unmarshalRuleData(withBuf); err != errRuleData {
		t.Errorf("a buffer length past the message: %v, want %v", err, errRuleData)
	}
	// A string field longer than what is left of the buffer.
	ne.PutUint32(withBuf[ruleDataHead-4:], 3)
	ne.PutUint32(withBuf[8:], 1)
	base := 12 + 4*bitmaskWords
	ne.PutUint32(withBuf[base:], fieldFilterKey)
	ne.PutUint32(withBuf[base+4*maxFields:], 4)
	if _, err := unmarshalRuleData(withBuf); err != errRuleData {
		t.Errorf("a key of 4 bytes in a 3-byte buffer: %v, want %v", err, errRuleData)
	}
}

// TestSameRuleIgnoresOnlyTheClassBits: the kernel expands the syscall
// classes, the top 16 bits of the mask's last word, so a listed rule that
// differs there is the rule loaded; any other bit makes it another rule.
func TestSameRuleIgnoresOnlyTheClassBits(t *testing.T) {
	d := Rule{Action: actionAlways, Syscalls: []int{59}}.kernelForm()
	for _, tt := range []struct {
		name string
		word int
		bit  uint32
		same bool
	}{
		{"a class bit", bitmaskWords - 1, 1 << 31, true},
		{"the lowest class bit", bitmaskWords - 1, 1 << (32 - syscallClasses), true},
		{"a syscall below the classes in the last word", bitmaskWords - 1, 1 << (32 - syscallClasses - 1), false},
		{"the same bit in the word before", bitmaskWords - 2, 1 << 31, false},
	} {
		k := d
		k.mask[tt.word] |= tt.bit
		if got := d.sameRule(k); got != tt.same {
			t.Errorf("%s: sameRule = %v, want %v", tt.name, got, tt.same)
		}
	}
}

// TestParseRulesBound: a rules file may hold maxRules rules, not one more,
// and the refusal names the line.
func TestParseRulesBound(t *testing.T) {
	rules := strings.Repeat("-a always,exit -S execve\n", maxRules)
	rs, err := ParseRules(strings.NewReader(rules), "lab.rules")
	if err != nil || len(rs.Rules) != maxRules {
		t.Fatalf("%d rules: %v", maxRules, err)
	}
	_, err = ParseRules(strings.NewReader(rules+"-a always,exit -S execve\n"), "lab.rules")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("lab.rules:%d: more than %d rules", maxRules+1, maxRules)) {
		t.Errorf("%d rules: %v, want the line named", maxRules+1, err)
	}
}
