package audit

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAssembleEvents(t *testing.T) {
	a := newAssembler()
	now := time.Unix(100, 0)
	in := []struct {
		typ  uint16
		text string
	}{
		{1300, `audit(1796112666.327:100): arch=c000003e syscall=59 success=yes exit=0 ppid=1 pid=2 auid=4242 uid=0 ses=197 comm="id" exe="/usr/bin/id" key="aptl_exec"`},
		{1309, `audit(1796112666.327:100): argc=1 a0="/usr/bin/id"` + "\x00"},
		{1006, `audit(1796112666.400:101): pid=3 uid=0 old-auid=4242 auid=1 tty=(none) old-ses=197 ses=4294967295 res=0`},
		{1320, `audit(1796112666.327:100): `},
		{1107, `audit(1796112666.500:102): pid=4 uid=0 auid=4242 ses=198 msg='ses=197 forged'`},
		{1300, `not a record`},
	}
	var done []*Event
	for _, r := range in {
		done = append(done, a.add(r.typ, r.text, now)...)
	}
	if len(done) != 1 || done[0].Serial != 100 || done[0].Ses != 197 || len(done[0].Records) != 2 {
		t.Fatalf("EOE completed %+v", done)
	}
	if got := string(done[0].AppendLog(nil)); !strings.HasPrefix(got, `type=SYSCALL msg=audit(1796112666.327:100): arch=`) || !strings.Contains(got, "\ntype=EXECVE msg=audit(1796112666.327:100): argc=1 a0=\"/usr/bin/id\"\n") {
		t.Errorf("log lines %q", got)
	}
	if done[0].Time != time.Unix(1796112666, 327e6) {
		t.Errorf("time %v", done[0].Time)
	}
	if a.malformed != 1 {
		t.Errorf("malformed %d", a.malformed)
	}
	if rest := a.expire(now.Add(eventLinger / 2)); len(rest) != 0 {
		t.Errorf("expired early: %+v", rest)
	}
	rest := a.expire(now.Add(eventLinger))
	if len(rest) != 2 {
		t.Fatalf("lingering events %+v", rest)
	}
	// A refused loginuid change belongs to the old session; a user
	// message to the kernel's ses field, not to one in its free text.
	if rest[0].Ses != 197 || rest[1].Ses != 198 {
		t.Errorf("sessions %d %d, want 197 198", rest[0].Ses, rest[1].Ses)
	}
	if TypeName(1107) != "USER_AVC" || TypeName(4242) != "UNKNOWN[4242]" {
		t.Error("type names")
	}
}

func TestAssemblerBounds(t *testing.T) {
	a := newAssembler()
	now := time.Unix(0, 0)
	var done int
	for i := range maxOpenEvents + 10 {
		done += len(a.add(1300, "audit(1.000:"+strconv.Itoa(i)+"): ses=1", now))
	}
	if done != 10 || len(a.open) != maxOpenEvents {
		t.Errorf("completed %d, open %d", done, len(a.open))
	}
	for range maxEventRecords + 5 {
		a.add(1302, "audit(2.000:999999): item=0", now)
	}
	e := a.flush()
	last := e[len(e)-1]
	if len(last.Records) != maxEventRecords || last.Truncated != 5 {
		t.Errorf("records %d truncated %d", len(last.Records), last.Truncated)
	}
}

func TestProcAcctLines(t *testing.T) {
	p := newProcAcct()
	ev := func(ms int, text string) *Event {
		return &Event{Time: time.Unix(1796112666, int64(ms)*1e6), Records: []Record{{Type: typeSyscall, Text: "audit(1796112666.000:1): " + text}}}
	}
	if l := p.event(ev(100, `arch=c000003e syscall=59 success=yes exit=0 ppid=1 pid=2 auid=4242 uid=1000 ses=5 comm="bash" exe="/usr/bin/bash"`)); len(l) != 0 {
		t.Errorf("exec wrote %q", l)
	}
	l := string(p.event(ev(200, `arch=c000003e syscall=59 success=yes exit=0 ppid=1 pid=2 auid=4242 uid=1000 ses=5 comm="id" exe="/usr/bin/id"`)))
	if l != "start=2026-12-01T08:11:06.100Z end=2026-12-01T08:11:06.200Z pid=2 ppid=1 uid=1000 auid=4242 ses=5 status=exec comm=\"bash\" exe=\"/usr/bin/bash\"\n" {
		t.Errorf("re-exec line %q", l)
	}
	l = string(p.event(ev(300, `arch=c000003e syscall=231 a0=3 ppid=1 pid=2 auid=4242 uid=1000 ses=5 comm="id" exe="/usr/bin/id"`)))
	if !strings.Contains(l, "end=2026-12-01T08:11:06.300Z pid=2") || !strings.Contains(l, "status=3 comm=\"id\"") {
		t.Errorf("exit line %q", l)
	}
	p.event(ev(400, `arch=40000003 syscall=11 success=yes exit=0 ppid=2 pid=9 auid=4242 uid=0 ses=5 comm=2F746D702F6120622E7368 exe="/tmp/x"`))
	if l := string(p.end()); !strings.Contains(l, "end=- pid=9") || !strings.Contains(l, "status=- comm=2F746D702F6120622E7368") {
		t.Errorf("still running at stop: %q", l)
	}
}

// TestRecordTextIsOneLine: a newline inside a record's text (a user
// message's text is the sender's) does not start a line of its own.
func TestRecordTextIsOneLine(t *testing.T) {
	a := newAssembler()
	now := time.Unix(100, 0)
	forged := "audit(1796112666.500:103): pid=4 uid=0 auid=4242 ses=198 msg='op=x\ntype=SYSCALL msg=audit(1.000:1): ses=197 tty=pts9'\n"
	a.add(1005, forged, now)
	done := a.expire(now.Add(eventLinger))
	if len(done) != 1 || done[0].Ses != 198 {
		t.Fatalf("events %+v", done)
	}
	got := string(done[0].AppendLog(nil))
	if strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, "type=USER msg=audit(1796112666.500:103): ") || !strings.Contains(got, "op=x type=SYSCALL") {
		t.Errorf("log lines %q, want one USER line", got)
	}
}

// Equivalent mutants (gremlins): events.go parseHeader's `end < 0` -> `<= 0`
// (an empty stamp fails the Cut that follows) and add's `len(text) >
// maxRecordText` -> `>=` (cutting a text to the length it has).

// TestParseHeaderMilliseconds: the header's time is seconds and three
// digits of milliseconds: .999 is the last millisecond of a second;
// 1000 or a negative count is not a kernel header.
func TestParseHeaderMilliseconds(t *testing.T) {
	for _, tt := range []struct {
		text string
		ok   bool
	}{
		{"audit(1796112666.999:7): x", true},
		{"audit(1796112666.000:7): x", true},
		{"audit(1796112666.1000:7): x", false},
		{"audit(1796112666.-1:7): x", false},
	} {
		at, serial, ok := parseHeader(tt.text)
		if ok != tt.ok {
			t.Errorf("%q: ok %v, want %v", tt.text, ok, tt.ok)
		}
		if ok && (serial != 7 || at.Unix() != 1796112666) {
			t.Errorf("%q: %v serial %d", tt.text, at, serial)
		}
	}
	if at, _, _ := parseHeader("audit(1796112666.999:7): x"); at.Nanosecond() != 999e6 {
		t.Errorf("the milliseconds read as %d ns", at.Nanosecond())
	}
}

// TestProcAcctTracksUpToItsBound: process accounting follows maxTracked
// processes at once; the next exec is counted as not followed, not kept.
func TestProcAcctTracksUpToItsBound(t *testing.T) {
	p := newProcAcct()
	exec := func(pid int) *Event {
		return &Event{Time: time.Unix(1796112666, 0), Records: []Record{{Type: typeSyscall,
			Text: fmt.Sprintf(`audit(1796112666.000:1): arch=c000003e syscall=59 success=yes exit=0 ppid=1 pid=%d auid=4242 uid=1000 ses=5 comm="sh" exe="/bin/sh"`, pid)}}}
	}
	for pid := range maxTracked {
		p.event(exec(pid + 2))
	}
	if len(p.live) != maxTracked || p.overflow != 0 {
		t.Fatalf("%d processes followed, %d not, after %d execs; want all followed", len(p.live), p.overflow, maxTracked)
	}
	p.event(exec(maxTracked + 2))
	if len(p.live) != maxTracked || p.overflow != 1 {
		t.Errorf("%d processes followed, %d not, after one exec more; want %d and 1", len(p.live), p.overflow, maxTracked)
	}
}
