package audit

import (
	"encoding/binary"
	"errors"
	"slices"
)

// struct audit_rule_data (include/uapi/linux/audit.h), the rule as the
// audit netlink carries it, in the host's byte order:
//
//	u32 flags, action, field_count
//	u32 mask[64]                 syscall bitmap
//	u32 fields[64], values[64], fieldflags[64]
//	u32 buflen
//	char buf[buflen]             string values, in field order
const (
	bitmaskWords = 64 // AUDIT_BITMASK_SIZE
	ruleDataHead = 4*3 + 4*bitmaskWords + 3*4*maxFields + 4
	// syscallClasses are the top bits of the mask, which the kernel
	// expands into classes of syscalls (AUDIT_SYSCALL_CLASSES).
	syscallClasses = 16
)

// scopeField is the condition the witness adds to every rule it loads:
// the process has a loginuid (the launch agent sets it on session
// processes; daemons and processes nobody logged in have none). It is the
// only scope the kernel can apply before the sidecar knows a session's ses
// (see engine_linux.go), and it keeps the records of the rest of the host
// (unset auid) out of the multicast entirely.
var scopeField = Field{ID: fieldLoginUIDSet, Op: opEqual, Value: 1}

// ruleData is a rule's kernel form.
type ruleData struct {
	flags, action uint32
	mask          [bitmaskWords]uint32
	fields        []Field
}

// kernelForm is r as the witness loads it: on its list (exit, or
// io_uring), with the scope field added.
func (r Rule) kernelForm() ruleData {
	d := ruleData{flags: filterExit, action: r.Action}
	if r.URing {
		d.flags = filterURingExit
	}
	if r.Syscalls == nil {
		for i := range d.mask {
			d.mask[i] = ^uint32(0)
		}
	} else {
		for _, nr := range r.Syscalls {
			d.mask[nr/32] |= 1 << (nr % 32)
		}
	}
	if r.Watch != "" {
		id := uint32(fieldWatch)
		if r.WatchDir {
			id = fieldDir
		}
		d.fields = append(d.fields, Field{ID: id, Op: opEqual, Value: uint32(len(r.Watch)), Text: r.Watch})
	}
	d.fields = append(d.fields, r.Fields...)
	d.fields = append(d.fields, scopeField)
	if r.Key != "" {
		d.fields = append(d.fields, Field{ID: fieldFilterKey, Op: opEqual, Value: uint32(len(r.Key)), Text: r.Key})
	}
	return d
}

// marshal encodes d as struct audit_rule_data.
func (d ruleData) marshal() []byte {
	var buf []byte
	for _, f := range d.fields {
		buf = append(buf, f.Text...)
	}
	b := make([]byte, ruleDataHead, ruleDataHead+len(buf))
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], d.flags)
	ne.PutUint32(b[4:], d.action)
	ne.PutUint32(b[8:], uint32(len(d.fields)))
	for i, m := range d.mask {
		ne.PutUint32(b[12+4*i:], m)
	}
	base := 12 + 4*bitmaskWords
	for i, f := range d.fields {
		ne.PutUint32(b[base+4*i:], f.ID)
		ne.PutUint32(b[base+4*maxFields+4*i:], f.Value)
		ne.PutUint32(b[base+8*maxFields+4*i:], f.Op)
	}
	ne.PutUint32(b[ruleDataHead-4:], uint32(len(buf)))
	return append(b, buf...)
}

var errRuleData = errors.New("audit: malformed rule from the kernel")

// unmarshalRuleData decodes a rule the kernel lists (AUDIT_LIST_RULES).
func unmarshalRuleData(b []byte) (ruleData, error) {
	var d ruleData
	if len(b) < ruleDataHead {
		return d, errRuleData
	}
	ne := binary.NativeEndian
	d.flags, d.action = ne.Uint32(b[0:]), ne.Uint32(b[4:])
	n := ne.Uint32(b[8:])
	buflen := ne.Uint32(b[ruleDataHead-4:])
	if n > maxFields || uint64(buflen) > uint64(len(b)-ruleDataHead) {
		return d, errRuleData
	}
	for i := range d.mask {
		d.mask[i] = ne.Uint32(b[12+4*i:])
	}
	base := 12 + 4*bitmaskWords
	buf := b[ruleDataHead : ruleDataHead+int(buflen)]
	for i := range int(n) {
		f := Field{ID: ne.Uint32(b[base+4*i:]), Value: ne.Uint32(b[base+4*maxFields+4*i:]), Op: ne.Uint32(b[base+8*maxFields+4*i:])}
		if isStringField(f.ID) {
			if uint64(f.Value) > uint64(len(buf)) {
				return d, errRuleData
			}
			f.Text, buf = string(buf[:f.Value]), buf[f.Value:]
		}
		d.fields = append(d.fields, f)
	}
	return d, nil
}

func isStringField(id uint32) bool {
	return id == fieldWatch || id == fieldDir || id == fieldFilterKey
}

// sameRule reports whether a rule the kernel lists is d. The kernel
// expands the class bits at the top of the mask, so those are not compared.
func (d ruleData) sameRule(k ruleData) bool {
	if d.flags != k.flags || d.action != k.action || !slices.Equal(d.fields, k.fields) {
		return false
	}
	for i := range d.mask {
		m, km := d.mask[i], k.mask[i]
		if i*32 >= bitmaskWords*32-32 {
			keep := uint32(1)<<(32-syscallClasses) - 1
			m, km = m&keep, km&keep
		}
		if m != km {
			return false
		}
	}
	return true
}

// key returns the rule's filter key, "" when it has none.
func (d ruleData) key() string {
	for _, f := range d.fields {
		if f.ID == fieldFilterKey {
			return f.Text
		}
	}
	return ""
}

// equal reports whether two rules the kernel listed are the same, exactly.
func (d ruleData) equal(k ruleData) bool {
	return d.flags == k.flags && d.action == k.action && d.mask == k.mask && slices.Equal(d.fields, k.fields)
}
