package audit

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLoginMove(t *testing.T) {
	for _, c := range []struct {
		text     string
		from, to uint32
		ok       bool
	}{
		{"pid=7 uid=0 old-auid=4247 auid=0 tty=(none) old-ses=100 ses=101 res=1", 100, 101, true},
		// A first loginuid: from no session, nothing to follow.
		{"pid=7 uid=0 old-auid=4294967295 auid=4247 tty=(none) old-ses=4294967295 ses=100 res=1", unsetID, 100, false},
		// A refused change: the process stays where it was.
		{"pid=7 uid=0 old-auid=4247 auid=0 tty=(none) old-ses=100 ses=4294967295 res=0", 100, unsetID, false},
		{"pid=7 uid=0 old-auid=4247 auid=0 tty=(none) old-ses=100 ses=101 res=0", 100, 101, false},
		{"pid=7 old-ses=100 ses=100 res=1", 100, 100, false},
	} {
		from, to, ok := loginMove(&Event{Records: []Record{{Type: typeSyscall, Text: "audit(1.0:1): ses=100"}, {Type: typeLogin, Text: "audit(1.0:1): " + c.text}}})
		if from != c.from || to != c.to || ok != c.ok {
			t.Errorf("%s: %d -> %d %v, want %d -> %d %v", c.text, from, to, ok, c.from, c.to, c.ok)
		}
	}
	if _, _, ok := loginMove(&Event{Records: []Record{{Type: typeSyscall, Text: "audit(1.0:1): old-ses=1 ses=2 res=1"}}}); ok {
		t.Error("a SYSCALL record taken for a LOGIN")
	}
}

func TestURingSessionFromTheProcessAccounting(t *testing.T) {
	p := newProcAcct()
	p.live["4321"] = proc{ses: "77"}
	worker := &Event{Ses: unsetID, Records: []Record{{Type: typeURingOp, Text: `audit(1.0:2): uring_op=16 success=yes exit=0 items=0 ppid=1 pid=4321 uid=0 key="aptl_uring"`}}}
	if ses := p.uringSession(worker); ses != 77 {
		t.Errorf("worker event of a followed process: ses %d, want 77", ses)
	}
	stranger := &Event{Records: []Record{{Type: typeURingOp, Text: "audit(1.0:3): uring_op=16 pid=9999"}}}
	if ses := p.uringSession(stranger); ses != unsetID {
		t.Errorf("worker event of a process not followed: ses %d, want unset", ses)
	}
	if ses := p.uringSession(&Event{Records: []Record{{Type: typeSyscall, Text: "audit(1.0:4): pid=4321"}}}); ses != unsetID {
		t.Errorf("an event without URINGOP: ses %d, want unset", ses)
	}
}

func TestReadOwnedRefusesWhatIsNotADigest(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	d := ruleDigest(Rule{Syscalls: []int{59}}.kernelForm())
	os.WriteFile(good, []byte(d+"\n"), 0o600)
	if got, err := readOwned(good); err != nil || !got[d] || len(got) != 1 {
		t.Fatalf("readOwned: %v %v", got, err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte(d+"\nnot-a-digest\n"), 0o600)
	if got, err := readOwned(bad); err == nil || len(got) != 0 {
		t.Errorf("a malformed file: %v %v, want nothing and an error", got, err)
	}
	if got, err := readOwned(filepath.Join(dir, "missing")); err != nil || len(got) != 0 {
		t.Errorf("a missing file: %v %v, want nothing", got, err)
	}
	if got, err := readOwned(""); err != nil || len(got) != 0 {
		t.Errorf("no file: %v %v", got, err)
	}
}
