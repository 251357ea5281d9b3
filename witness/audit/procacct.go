package audit

import (
	"strconv"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/auditfmt"
)

// Process lifetimes of the lab's session processes, derived from the audit
// records, for <root>/_proc-acct/proc-acct.log. BSD accounting (acct(2))
// records only the processes of the PID namespace that enabled it, and the
// sidecar does not share the workload's, so it cannot see them; the audit
// records can. One line per process image, written when it ends:
//
//	start=<time> end=<time|-> pid=<n> ppid=<n> uid=<n> auid=<n> ses=<n> status=<n|exec|-> comm=<c> exe=<e>
//
// Times are RFC 3339 UTC with milliseconds (the kernel's resolution); pids
// are the host's. An image starts at a successful execve or execveat and
// ends at exit_group (status is its argument), or at the next exec of the
// same pid (status=exec). A process killed by a signal leaves no exit_group
// record: its line is written when the witness stops, with end=- and
// status=-; so is one still running then. comm and exe are the kernel's
// values as the audit record has them (quoted, or hex when the kernel
// encoded them). The witness adds exit_group rules (key aptl_procacct) for
// this, scoped like the lab's rules.

// procacctKey is the key of the witness's own exit_group rules.
const procacctKey = "aptl_procacct"

// maxTracked bounds the live processes followed; past it new ones are
// counted in overflow and not followed.
const maxTracked = 1 << 16

type proc struct {
	start                time.Time
	ppid, uid, auid, ses string
	comm, exe            string
}

type procAcct struct {
	live     map[string]proc // by pid
	overflow int64
	line     []byte
}

func newProcAcct() *procAcct { return &procAcct{live: map[string]proc{}} }

// procacctRules are the rules procacct needs beside the lab's.
func procacctRules() []Rule {
	var rs []Rule
	for _, arch := range []uint32{archX8664, archI386} {
		rs = append(rs, Rule{Where: "(process accounting)", Action: actionAlways,
			Syscalls: []int{archSyscalls(arch)["exit_group"]}, Key: procacctKey,
			Fields: []Field{{ID: fieldArch, Op: opEqual, Value: arch}}})
	}
	return rs
}

// syscallOf returns the event's SYSCALL record text.
func syscallOf(e *Event) (string, bool) {
	for _, r := range e.Records {
		if r.Type == typeSyscall {
			return r.Text, true
		}
	}
	return "", false
}

// event follows one event; it returns the lines of the images it ended.
func (p *procAcct) event(e *Event) []byte {
	text, ok := syscallOf(e)
	if !ok {
		return nil
	}
	arch, _ := auditfmt.Field(text, "arch")
	nr, _ := auditfmt.Field(text, "syscall")
	pid, _ := auditfmt.Field(text, "pid")
	table := syscallsX8664
	if arch == "40000003" {
		table = syscallsI386
	}
	p.line = p.line[:0]
	switch nr {
	case strconv.Itoa(table["execve"]), strconv.Itoa(table["execveat"]):
		if ok, _ := auditfmt.Field(text, "success"); ok != "yes" {
			return nil
		}
		if old, ok := p.live[pid]; ok {
			p.line = old.appendLine(p.line, pid, e.Time.UTC().Format(timeFormat), "exec")
			delete(p.live, pid)
		}
		if len(p.live) >= maxTracked {
			p.overflow++
			return p.line
		}
		c, _ := auditfmt.RawField(text, "comm")
		x, _ := auditfmt.RawField(text, "exe")
		ppid, _ := auditfmt.Field(text, "ppid")
		uid, _ := auditfmt.Field(text, "uid")
		auid, _ := auditfmt.Field(text, "auid")
		ses, _ := auditfmt.Field(text, "ses")
		p.live[pid] = proc{start: e.Time, ppid: ppid, uid: uid, auid: auid, ses: ses, comm: c, exe: x}
	case strconv.Itoa(table["exit_group"]):
		a0, _ := auditfmt.Field(text, "a0")
		st, err := strconv.ParseUint(a0, 16, 64)
		status := "-"
		if err == nil {
			status = strconv.Itoa(int(int32(st)) & 0xff)
		}
		if old, ok := p.live[pid]; ok {
			p.line = old.appendLine(p.line, pid, e.Time.UTC().Format(timeFormat), status)
			delete(p.live, pid)
		}
	}
	return p.line
}

// end writes the lines of every image still followed (end=-).
func (p *procAcct) end() []byte {
	var b []byte
	for pid, pr := range p.live {
		b = pr.appendLine(b, pid, "-", "-")
	}
	clear(p.live)
	return b
}

// timeFormat is the lines' time format.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func (pr proc) appendLine(b []byte, pid, end, status string) []byte {
	b = append(b, "start="...)
	b = append(b, pr.start.UTC().Format(timeFormat)...)
	for _, kv := range [][2]string{{"end", end}, {"pid", pid}, {"ppid", pr.ppid}, {"uid", pr.uid}, {"auid", pr.auid},
		{"ses", pr.ses}, {"status", status}, {"comm", pr.comm}, {"exe", pr.exe}} {
		b = append(b, ' ')
		b = append(b, kv[0]...)
		b = append(b, '=')
		b = append(b, kv[1]...)
	}
	return append(b, '\n')
}
