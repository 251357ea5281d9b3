package recorder

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/diskstate"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/internal/witnessbudget"
)

// fakeVolume is a diskstate.Source whose free bytes a test sets: a
// 1000-byte volume, marks low 100, critical 50, resume 150.
type fakeVolume struct {
	mu   sync.Mutex
	free int64
}

func (v *fakeVolume) read() (diskstate.Usage, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return diskstate.Usage{Free: v.free, Size: 1000}, nil
}

// set sets the free bytes and polls, as the monitor's loop would.
func (v *fakeVolume) set(t *testing.T, m *diskstate.Monitor, free int64) {
	t.Helper()
	v.mu.Lock()
	v.free = free
	v.mu.Unlock()
	if _, err := m.Poll(); err != nil {
		t.Fatal(err)
	}
}

func newFakeDisk(t *testing.T, free int64) (*diskstate.Monitor, *fakeVolume) {
	t.Helper()
	v := &fakeVolume{free: free}
	m, err := diskstate.New(v.read, diskstate.Thresholds{LowPercent: 10, CriticalPercent: 5, ResumePercent: 15})
	if err != nil {
		t.Fatal(err)
	}
	return m, v
}

// logRecords are the records of dir's integrity log.
func logRecords(t *testing.T, dir string) []integrity.Record {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rs []integrity.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r integrity.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}

// ofType are the records of type typ.
func ofType(rs []integrity.Record, typ string) []integrity.Record {
	var out []integrity.Record
	for _, r := range rs {
		if r.Type == typ {
			out = append(out, r)
		}
	}
	return out
}

// gateSource opens witnesses that ask their gate before each item and
// count what it refused, as the pcap and audit witnesses do.
type gateSource struct {
	mu    sync.Mutex
	gates []WitnessGate
}

func (g *gateSource) Class() string { return "gate" }
func (g *gateSource) Open(o WitnessOpen) (Witness, map[string]string) {
	g.mu.Lock()
	g.gates = append(g.gates, o.Gate)
	g.mu.Unlock()
	return plainWitness{}, nil
}

// TestDiskTransitionsInEveryOpenSession: each transition is a disk record
// in the chain of every open session, in order, with the reading and the
// marks; the witnesses' gate refuses while the volume is not ok; the
// transcript goes on; and both records verify ok.
func TestDiskTransitionsInEveryOpenSession(t *testing.T) {
	m, v := newFakeDisk(t, 500)
	src := &gateSource{}
	opts := testOptions()
	opts.Disk, opts.Witnesses = m, []WitnessSource{src}
	root := t.TempDir()
	a := createSession(t, root, Meta{RunID: "r", SessionID: "a"}, opts)
	b := createSession(t, root, Meta{RunID: "r", SessionID: "b"}, opts)
	gate := src.gates[0]
	if got := gate.Admit(10); got != StoreOK {
		t.Fatalf("gate on an ok volume: %v", got)
	}
	v.set(t, m, 90) // ok -> low
	if got := gate.Admit(10); got != StoreDiskLow {
		t.Fatalf("gate on a low volume: %v, want StoreDiskLow", got)
	}
	mustOK(t, a.Output([]byte("the transcript goes on\r\n")))
	v.set(t, m, 40)  // low -> critical
	v.set(t, m, 120) // critical -> low
	v.set(t, m, 160) // low -> ok
	if got := gate.Admit(10); got != StoreOK {
		t.Fatalf("gate after resume: %v", got)
	}
	mustOK(t, a.Output([]byte("and on\r\n")))
	mustOK(t, a.Close(0))
	mustOK(t, b.Close(0))
	want := []string{"ok>low", "low>critical", "critical>low", "low>ok"}
	for _, s := range []*Session{a, b} {
		var got []string
		for _, r := range ofType(logRecords(t, s.Dir()), vocab.TypeDisk) {
			got = append(got, r.Attrs[vocab.AttrDiskFrom]+">"+r.Attrs[vocab.AttrDiskState])
			if r.Attrs[vocab.AttrDiskSize] != "1000" || r.Attrs[vocab.AttrDiskLowMark] != "100" ||
				r.Attrs[vocab.AttrDiskCriticalMark] != "50" || r.Attrs[vocab.AttrDiskResumeMark] != "150" || r.Attrs[vocab.AttrDiskFree] == "" {
				t.Errorf("disk record attrs %v", r.Attrs)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: disk records %v, want %v", s.Dir(), got, want)
		}
		rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{})
		if rep.Status != evidence.StatusOK || len(rep.Anomalies) != 0 {
			t.Errorf("%s: status %s anomalies %v", s.Dir(), rep.Status, rep.Anomalies)
		}
	}
	ts, err := os.ReadFile(filepath.Join(a.Dir(), vocab.PTYDir, vocab.TypescriptFile))
	mustOK(t, err)
	if !strings.Contains(string(ts), "the transcript goes on\r\nand on\r\n") {
		t.Errorf("typescript %q lacks the bytes recorded while the volume was low", ts)
	}
}

// TestDiskCriticalRefusesNewSessions: Create refuses a session while the
// volume is critical, saying so with the reading, and makes no folder;
// once the volume is low again sessions start, and their first record
// after the open one says the volume is low.
func TestDiskCriticalRefusesNewSessions(t *testing.T) {
	m, v := newFakeDisk(t, 40)
	opts := testOptions()
	opts.Disk = m
	root := t.TempDir()
	_, err := Create(root, Meta{RunID: "r", SessionID: "refused"}, opts)
	var dc *DiskCriticalError
	if !errors.Is(err, ErrDiskCritical) || !errors.As(err, &dc) || dc.Free != 40 || dc.Below != 50 {
		t.Fatalf("Create on a critical volume: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "r", "refused")); !os.IsNotExist(err) {
		t.Errorf("a refused session left a folder: %v", err)
	}
	// Freed since the last poll: Create reads the volume again.
	v.mu.Lock()
	v.free = 120
	v.mu.Unlock()
	s := createSession(t, root, Meta{RunID: "r", SessionID: "low"}, opts)
	mustOK(t, s.Close(0))
	rs := logRecords(t, s.Dir())
	if len(rs) < 2 || rs[1].Type != vocab.TypeDisk || rs[1].Attrs[vocab.AttrDiskState] != vocab.DiskLow || rs[1].Attrs[vocab.AttrDiskFrom] != "" {
		t.Fatalf("records after open: %v", rs[1])
	}
	if rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{}); rep.Status != evidence.StatusOK {
		t.Errorf("status %s anomalies %v", rep.Status, rep.Anomalies)
	}
}

// TestDiskTransitionAfterCloseIsNotRecorded: a closed session hears no
// more transitions, and its record stays as closed.
func TestDiskTransitionAfterCloseIsNotRecorded(t *testing.T) {
	m, v := newFakeDisk(t, 500)
	opts := testOptions()
	opts.Disk = m
	s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "s"}, opts)
	mustOK(t, s.Close(0))
	before, _ := os.ReadFile(filepath.Join(s.Dir(), vocab.PTYDir, vocab.LogFile))
	v.set(t, m, 90)
	time.Sleep(50 * time.Millisecond) // a stray recordDisk would have run
	after, _ := os.ReadFile(filepath.Join(s.Dir(), vocab.PTYDir, vocab.LogFile))
	if string(before) != string(after) {
		t.Error("a transition after the close changed the log")
	}
}

// TestWitnessGateBudget: the gate counts admitted bytes against the run's
// and the volume's budgets and says which one is spent.
func TestWitnessGateBudget(t *testing.T) {
	opts := testOptions()
	opts.Budget = witnessbudget.New(witnessbudget.Limits{Run: 100, Volume: 150})
	src := &gateSource{}
	opts.Witnesses = []WitnessSource{src}
	root := t.TempDir()
	for _, id := range []string{"a", "b"} {
		s := createSession(t, root, Meta{RunID: "run-" + id, SessionID: id}, opts)
		defer s.Close(0)
	}
	ga, gb := src.gates[0], src.gates[1]
	if ga.Admit(90) != StoreOK || ga.Admit(20) != StoreRunBudget {
		t.Fatal("run-a's budget of 100 admitted 110 bytes")
	}
	if gb.Admit(50) != StoreOK || gb.Admit(20) != StoreVolumeBudget {
		t.Fatal("the volume's budget of 150 admitted 160 bytes")
	}
}

// TestDiskTransitionIsSigned: a transition the monitor tells a running
// session of goes on the signing schedule with its disk record: in strict
// mode the log ends in a checkpoint over it once it is recorded.
func TestDiskTransitionIsSigned(t *testing.T) {
	m, v := newFakeDisk(t, 500)
	var heard []diskstate.Transition
	m.Subscribe(func(tr diskstate.Transition) { heard = append(heard, tr) })
	v.set(t, m, 90) // ok -> low
	if len(heard) != 1 {
		t.Fatalf("the monitor told of %d transitions, want 1", len(heard))
	}
	opts := testOptions()
	opts.Sync = SyncStrict
	s := createSession(t, t.TempDir(), Meta{RunID: "r", SessionID: "disk-signed"}, opts)
	// As the session's subscription queues it; called here, not on the
	// subscription's goroutine, so the test knows when it is done.
	s.disk.mu.Lock()
	s.disk.pending = heard
	s.disk.mu.Unlock()
	s.recordDisk()
	rs := logRecords(t, s.Dir())
	if len(rs) < 2 || rs[len(rs)-2].Type != vocab.TypeDisk {
		t.Fatalf("log %v: want the disk record, then its checkpoint", rs)
	}
	checkSignedHead(t, s, "disk transition")
}
