package audit

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// The lab's rules file, in auditctl syntax: one rule a line, '#' comments.
// The subset read here is what the lab uses:
//
//	-D                               accepted: see RuleSet.DeleteAll
//	-b N                             the backlog the witness asks for (raised, never lowered)
//	--backlog_wait_time N            accepted and not applied (a host-wide setting)
//	-a always,exit (or exit,always)  a syscall rule, with
//	  -F arch=b64|b32  -S name[,name]  -F field op value  -k key
//	-a always,io_uring               an io_uring rule (kernels since 5.16):
//	  -S op[,op]  -F field op value  -k key   io_uring operations by
//	  liburing's names without IORING_OP_ (connect, openat, ...), which
//	  syscall-exit rules never see: they run in the kernel's io_uring
//	  workers, not in a syscall of the process
//	-w path -p rwxa -k key           a file watch
//
// Anything else is refused with the file and line, so a rules file never
// loads with part of a rule silently dropped. A watch resolves in the
// sidecar's mount namespace, not the workload's (the kernel finds the path
// from the process that loads the rule): it sees the workload's files only
// where both share the mount; syscall rules scoped to session processes
// work across the boundary.

// Limits of a rule, the kernel's (include/uapi/linux/audit.h).
const (
	maxFields  = 64   // AUDIT_MAX_FIELDS
	maxKeyLen  = 256  // AUDIT_MAX_KEY_LEN
	maxPathLen = 4096 // PATH_MAX
	// maxRules and maxLineLen bound what a rules file may hold.
	maxRules   = 256
	maxLineLen = 8192
)

// Rule list, actions, field ids, operators and permissions
// (include/uapi/linux/audit.h).
const (
	filterExit      = 0x04 // AUDIT_FILTER_EXIT
	filterURingExit = 0x07 // AUDIT_FILTER_URING_EXIT
	actionNever     = 0
	actionAlways    = 2

	fieldPID         = 0
	fieldUID         = 1
	fieldEUID        = 2
	fieldGID         = 5
	fieldEGID        = 6
	fieldLoginUID    = 9
	fieldArch        = 11
	fieldPPID        = 18
	fieldLoginUIDSet = 24
	fieldSessionID   = 25
	fieldExit        = 103
	fieldSuccess     = 104
	fieldWatch       = 105
	fieldPerm        = 106
	fieldDir         = 107
	fieldFilterKey   = 210

	opBitMask   = 0x08000000
	opLess      = 0x10000000
	opGreater   = 0x20000000
	opNotEqual  = 0x30000000
	opEqual     = 0x40000000
	opBitTest   = opBitMask | opEqual
	opLessEq    = opLess | opEqual
	opGreaterEq = opGreater | opEqual

	permExec  = 1
	permWrite = 2
	permRead  = 4
	permAttr  = 8
)

// unsetID is the kernel's "not set" for auid and ses (AUDIT_UID_UNSET).
const unsetID = math.MaxUint32

// RuleSet is a parsed rules file.
type RuleSet struct {
	Rules []Rule
	// DeleteAll is -D. The witness never deletes rules it did not add (a
	// host auditd's stay untouched), and it adds its own only at start, so
	// -D is satisfied by construction and only noted.
	DeleteAll bool
	// Backlog is -b: the kernel's backlog limit the witness raises to if
	// it is lower (0: not set).
	Backlog uint32
	// Warnings are notes about what the file asked for and the witness
	// does differently; each names its line.
	Warnings []string
}

// Rule is one rule to load.
type Rule struct {
	Where string // file:line
	// URing: a rule of the io_uring list (AUDIT_FILTER_URING_EXIT), not of
	// the syscall-exit list.
	URing  bool
	Action uint32
	// Syscalls are the rule's syscalls, or its io_uring operations on the
	// io_uring list; nil: every one (watches, and rules without -S).
	Syscalls []int
	Fields   []Field
	Key      string
	Watch    string // the path of a -w rule
	WatchDir bool   // the path is a directory (AUDIT_DIR)
}

// Field is one -F condition.
type Field struct {
	ID, Op, Value uint32
	Text          string // the value of a string field (watch path, key)
}

// ParseRulesFile reads and parses a rules file.
func ParseRulesFile(path string) (*RuleSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit rules: %w", err)
	}
	defer f.Close()
	return ParseRules(f, path)
}

// ParseRules parses rules in auditctl syntax; name is the file's name in
// error messages.
func ParseRules(r io.Reader, name string) (*RuleSet, error) {
	rs := &RuleSet{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLineLen)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, n)
		if err := rs.parseLine(where, strings.Fields(line)); err != nil {
			return nil, fmt.Errorf("audit rules: %s: %w", where, err)
		}
		if len(rs.Rules) > maxRules {
			return nil, fmt.Errorf("audit rules: %s: more than %d rules", where, maxRules)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("audit rules: %s: %w", name, err)
	}
	return rs, nil
}

func (rs *RuleSet) parseLine(where string, args []string) error {
	switch args[0] {
	case "-D":
		if len(args) > 1 {
			return fmt.Errorf("-D takes no arguments here (got %q)", strings.Join(args[1:], " "))
		}
		rs.DeleteAll = true
		rs.Warnings = append(rs.Warnings, where+": -D removes no rule: the witness removes only the rules it added, at stop")
		return nil
	case "-b":
		n, err := oneNumber(args)
		rs.Backlog = n
		return err
	case "--backlog_wait_time":
		_, err := oneNumber(args)
		rs.Warnings = append(rs.Warnings, where+": --backlog_wait_time is not applied: it is a host-wide setting the witness leaves alone")
		return err
	case "-a", "-w":
		r, err := parseRule(args)
		if err != nil {
			return err
		}
		r.Where = where
		rs.Rules = append(rs.Rules, r)
		return nil
	}
	return fmt.Errorf("unsupported option %q (supported: -D, -b, --backlog_wait_time, -a always,exit, -a always,io_uring, -w)", args[0])
}

func oneNumber(args []string) (uint32, error) {
	if len(args) != 2 {
		return 0, fmt.Errorf("%s takes one number", args[0])
	}
	n, err := strconv.ParseUint(args[1], 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s %q: not a number", args[0], args[1])
	}
	return uint32(n), nil
}

// ruleParser collects one rule's options in the order given.
type ruleParser struct {
	r        Rule
	arch     uint32
	archSet  bool
	list     bool // -a seen
	perm     string
	syscalls []string
}

func parseRule(args []string) (Rule, error) {
	p := &ruleParser{r: Rule{Action: actionAlways}}
	for i := 0; i < len(args); i++ {
		opt := args[i]
		if i+1 >= len(args) {
			return Rule{}, fmt.Errorf("%s needs a value", opt)
		}
		i++
		if err := p.option(opt, args[i]); err != nil {
			return Rule{}, err
		}
	}
	return p.finish()
}

func (p *ruleParser) option(opt, val string) error {
	switch opt {
	case "-a":
		return p.listAction(val)
	case "-w":
		if p.r.Watch != "" {
			return fmt.Errorf("one -w a rule")
		}
		if !strings.HasPrefix(val, "/") || len(val) > maxPathLen {
			return fmt.Errorf("-w %q: the path must be absolute and at most %d bytes", val, maxPathLen)
		}
		p.r.Watch = val
	case "-p":
		p.perm = val
	case "-S":
		p.syscalls = append(p.syscalls, strings.Split(val, ",")...)
	case "-k":
		return p.key(val)
	case "-F":
		return p.field(val)
	default:
		return fmt.Errorf("unsupported rule option %q (supported: -a, -w, -p, -S, -F, -k)", opt)
	}
	return nil
}

func (p *ruleParser) listAction(val string) error {
	a, b, ok := strings.Cut(val, ",")
	if !ok || p.list {
		return fmt.Errorf("-a %q: want one -a always,exit or always,io_uring", val)
	}
	if a == "exit" || a == "io_uring" {
		a, b = b, a
	}
	switch b {
	case "exit":
	case "io_uring":
		p.r.URing = true
	default:
		return fmt.Errorf("-a %q: only the exit and io_uring lists are supported", val)
	}
	switch a {
	case "always":
		p.r.Action = actionAlways
	case "never":
		p.r.Action = actionNever
	default:
		return fmt.Errorf("-a %q: the action must be always or never", val)
	}
	p.list = true
	return nil
}

func (p *ruleParser) key(val string) error {
	if p.r.Key != "" {
		return fmt.Errorf("one key a rule")
	}
	if val == "" || len(val) > maxKeyLen {
		return fmt.Errorf("-k %q: a key is 1 to %d bytes", val, maxKeyLen)
	}
	p.r.Key = val
	return nil
}

// fieldIDs are the -F fields supported beside arch and key.
var fieldIDs = map[string]uint32{
	"pid": fieldPID, "ppid": fieldPPID, "uid": fieldUID, "euid": fieldEUID, "gid": fieldGID, "egid": fieldEGID,
	"auid": fieldLoginUID, "loginuid": fieldLoginUID, "ses": fieldSessionID, "exit": fieldExit, "success": fieldSuccess,
}

// ops are the comparison operators, longest first so "<=" is not read as "<".
var ops = []struct {
	text string
	op   uint32
}{{"!=", opNotEqual}, {"<=", opLessEq}, {">=", opGreaterEq}, {"&=", opBitTest}, {"=", opEqual}, {"<", opLess}, {">", opGreater}, {"&", opBitMask}}

func (p *ruleParser) field(val string) error {
	var name, text string
	var op uint32
	for _, o := range ops {
		if i := strings.Index(val, o.text); i > 0 {
			name, text, op = val[:i], val[i+len(o.text):], o.op
			break
		}
	}
	if name == "" {
		return fmt.Errorf("-F %q: want field, operator and value (e.g. auid>=1000)", val)
	}
	switch name {
	case "arch":
		return p.setArch(val, op, text)
	case "key":
		if op != opEqual {
			return fmt.Errorf("-F %q: key takes =", val)
		}
		return p.key(text)
	}
	id, ok := fieldIDs[name]
	if !ok {
		return fmt.Errorf("-F %q: unsupported field %q (supported: arch, key, auid, ses, uid, euid, gid, egid, pid, ppid, success, exit)", val, name)
	}
	f, err := fieldValue(id, op, text)
	if err != nil {
		return fmt.Errorf("-F %q: %w", val, err)
	}
	p.r.Fields = append(p.r.Fields, f)
	return nil
}

func (p *ruleParser) setArch(val string, op uint32, text string) error {
	if op != opEqual || p.archSet {
		return fmt.Errorf("-F %q: want one -F arch=b64 or arch=b32", val)
	}
	switch text {
	case "b64", "x86_64":
		p.arch = archX8664
	case "b32", "i386", "i686":
		p.arch = archI386
	default:
		return fmt.Errorf("-F %q: unsupported architecture (b64 or b32)", val)
	}
	p.archSet = true
	p.r.Fields = append(p.r.Fields, Field{ID: fieldArch, Op: opEqual, Value: p.arch})
	return nil
}

// fieldValue reads a numeric field's value. auid and ses "unset" (or -1,
// 4294967295) mean the kernel's "not set", which the kernel takes only as
// the loginuid_set field (a uid of -1 is invalid to it).
func fieldValue(id, op uint32, text string) (Field, error) {
	unset := text == "unset" || text == "-1" || text == "4294967295"
	if id == fieldLoginUID && unset {
		if op != opEqual && op != opNotEqual {
			return Field{}, fmt.Errorf("auid unset takes = or !=")
		}
		v := uint32(0)
		if op == opNotEqual {
			v = 1
		}
		return Field{ID: fieldLoginUIDSet, Op: opEqual, Value: v}, nil
	}
	if id == fieldSuccess {
		switch text {
		case "1", "yes":
			return Field{ID: id, Op: op, Value: 1}, nil
		case "0", "no":
			return Field{ID: id, Op: op, Value: 0}, nil
		}
		return Field{}, fmt.Errorf("success is yes or no")
	}
	if unset && id == fieldSessionID {
		return Field{ID: id, Op: op, Value: unsetID}, nil
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n < math.MinInt32 || n > math.MaxUint32 || (n < 0 && id != fieldExit) {
		return Field{}, fmt.Errorf("value %q: want a number (names are not resolved)", text)
	}
	return Field{ID: id, Op: op, Value: uint32(n)}, nil
}

func (p *ruleParser) finish() (Rule, error) {
	r := p.r
	if r.Watch != "" {
		if p.list || len(p.syscalls) > 0 || p.archSet {
			return Rule{}, fmt.Errorf("-w takes -p, -k and -F only (no -a, -S or arch)")
		}
		perm, err := parsePerm(p.perm)
		if err != nil {
			return Rule{}, err
		}
		r.Fields = append(r.Fields, Field{ID: fieldPerm, Op: opEqual, Value: perm})
		return r, checkFieldCount(r)
	}
	if !p.list {
		return Rule{}, fmt.Errorf("a rule needs -a always,exit or -w")
	}
	if p.perm != "" {
		return Rule{}, fmt.Errorf("-p belongs to -w rules")
	}
	if r.URing {
		return p.finishURing()
	}
	if !p.archSet && len(p.syscalls) > 0 {
		// auditctl's default: the machine's architecture.
		p.arch = archX8664
		r.Fields = append([]Field{{ID: fieldArch, Op: opEqual, Value: p.arch}}, r.Fields...)
	}
	table := archSyscalls(p.arch)
	for _, name := range p.syscalls {
		nr, ok := table[name]
		if !ok {
			return Rule{}, fmt.Errorf("-S %s: syscall not known to the witness for this architecture", name)
		}
		r.Syscalls = append(r.Syscalls, nr)
	}
	return r, checkFieldCount(r)
}

// finishURing completes an io_uring rule: its -S names are io_uring
// operations, and it takes no architecture (the operations are the same
// on every one; the kernel's io_uring list has no syscall to tell by).
func (p *ruleParser) finishURing() (Rule, error) {
	r := p.r
	if p.archSet {
		return Rule{}, fmt.Errorf("-F arch does not apply to io_uring rules")
	}
	for _, name := range p.syscalls {
		op, ok := uringOps[name]
		if !ok {
			return Rule{}, fmt.Errorf("-S %s: io_uring operation not known to the witness", name)
		}
		r.Syscalls = append(r.Syscalls, op)
	}
	return r, checkFieldCount(r)
}

func parsePerm(s string) (uint32, error) {
	if s == "" {
		return permRead | permWrite | permExec | permAttr, nil
	}
	var v uint32
	for _, c := range s {
		switch c {
		case 'r':
			v |= permRead
		case 'w':
			v |= permWrite
		case 'x':
			v |= permExec
		case 'a':
			v |= permAttr
		default:
			return 0, fmt.Errorf("-p %q: permissions are r, w, x and a", s)
		}
	}
	return v, nil
}

func checkFieldCount(r Rule) error {
	// +3: the watch path, the key, and the witness's own scope field.
	if len(r.Fields)+3 > maxFields {
		return fmt.Errorf("too many -F fields")
	}
	return nil
}
