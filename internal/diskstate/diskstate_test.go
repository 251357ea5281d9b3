package diskstate

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
)

// fakeVolume is a Source whose free bytes the test sets.
type fakeVolume struct {
	mu    sync.Mutex
	u     Usage
	err   error
	reads int
}

func (v *fakeVolume) source() (Usage, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.reads++
	return v.u, v.err
}

func (v *fakeVolume) setFree(n int64) {
	v.mu.Lock()
	v.u.Free = n
	v.mu.Unlock()
}

const mib = 1 << 20

// th are round thresholds on a 1000 MiB volume: marks low 100 MiB,
// critical 50 MiB, resume 150 MiB.
var th = Thresholds{LowPercent: 10, CriticalPercent: 5, ResumePercent: 15}

func newMonitor(t *testing.T, free int64) (*Monitor, *fakeVolume, *[]Transition) {
	t.Helper()
	v := &fakeVolume{u: Usage{Free: free, Size: 1000 * mib}}
	m, err := New(v.source, th)
	if err != nil {
		t.Fatal(err)
	}
	var got []Transition
	m.Subscribe(func(tr Transition) { got = append(got, tr) })
	return m, v, &got
}

// TestTransitions walks the free space down and up through every mark
// and checks each state and each transition heard, hysteresis included.
func TestTransitions(t *testing.T) {
	m, v, got := newMonitor(t, 500*mib)
	steps := []struct {
		free int64
		want State
	}{
		{101 * mib, OK},      // above low
		{100 * mib, OK},      // at low: not below it
		{99 * mib, Low},      // ok -> low
		{140 * mib, Low},     // above low, below resume: stays low
		{50 * mib, Low},      // at critical: not below it
		{49 * mib, Critical}, // low -> critical
		{60 * mib, Critical}, // above critical, below low: stays critical
		{100 * mib, Low},     // at low: critical -> low
		{149 * mib, Low},     // below resume
		{150 * mib, OK},      // at resume: low -> ok
		{10 * mib, Critical}, // ok -> critical at once
		{200 * mib, OK},      // critical -> ok at once
		{99 * mib, Low},      // ok -> low again
		{1000 * mib, OK},     // low -> ok
		{1000 * mib, OK},     // no change, no transition
	}
	var wantTr []string
	prev := OK
	for i, s := range steps {
		v.setFree(s.free)
		st, err := m.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if st.State != s.want || m.State() != s.want || m.Status().State != s.want {
			t.Fatalf("step %d: free %d MiB: state %s (State %s), want %s", i, s.free/mib, st.State, m.State(), s.want)
		}
		if s.want != prev {
			wantTr = append(wantTr, string(prev)+">"+string(s.want))
		}
		prev = s.want
	}
	var heard []string
	for i, tr := range *got {
		heard = append(heard, string(tr.From)+">"+string(tr.State))
		if tr.Seq != uint64(i+1) {
			t.Errorf("transition %d has seq %d", i, tr.Seq)
		}
		if tr.Marks != (Marks{Low: 100 * mib, Critical: 50 * mib, Resume: 150 * mib}) {
			t.Errorf("transition %d marks %+v", i, tr.Marks)
		}
		if tr.At.IsZero() {
			t.Errorf("transition %d has no time", i)
		}
	}
	if strings.Join(heard, " ") != strings.Join(wantTr, " ") {
		t.Errorf("heard %v\nwant  %v", heard, wantTr)
	}
}

// TestNextIsHysteretic checks the transition function alone, at each
// mark and one byte either side.
func TestNextIsHysteretic(t *testing.T) {
	mk := Marks{Low: 100, Critical: 50, Resume: 150}
	cases := []struct {
		cur  State
		free int64
		want State
	}{
		{OK, 100, OK}, {OK, 99, Low}, {OK, 49, Critical}, {OK, 50, Low},
		{Low, 149, Low}, {Low, 150, OK}, {Low, 50, Low}, {Low, 49, Critical}, {Low, 101, Low},
		{Critical, 99, Critical}, {Critical, 100, Low}, {Critical, 149, Low}, {Critical, 150, OK}, {Critical, 0, Critical},
	}
	for _, c := range cases {
		if got := Next(c.cur, c.free, mk); got != c.want {
			t.Errorf("Next(%s, %d) = %s, want %s", c.cur, c.free, got, c.want)
		}
	}
}

// TestStartState: a monitor starts in the state its first reading gives.
func TestStartState(t *testing.T) {
	for _, c := range []struct {
		free int64
		want State
	}{{500 * mib, OK}, {120 * mib, OK}, {80 * mib, Low}, {20 * mib, Critical}} {
		m, _, got := newMonitor(t, c.free)
		if m.State() != c.want {
			t.Errorf("free %d MiB: starts %s, want %s", c.free/mib, m.State(), c.want)
		}
		if len(*got) != 0 {
			t.Errorf("the start is no transition: %v", *got)
		}
	}
}

// TestFloors: a mark is the larger of its share and its floor.
func TestFloors(t *testing.T) {
	d := DefaultThresholds()
	if err := d.Check(); err != nil {
		t.Fatal(err)
	}
	small := d.Marks(1 << 30) // 1 GiB: the floors win
	if small != (Marks{Low: 256 * mib, Critical: 64 * mib, Resume: 384 * mib}) {
		t.Errorf("1 GiB marks %+v", small)
	}
	big := d.Marks(100 << 30) // 100 GiB: the shares win
	if big.Low != 10<<30 || big.Critical != 5<<30 || big.Resume != 15<<30 {
		t.Errorf("100 GiB marks %+v", big)
	}
	// No overflow on the largest volume statfs can report.
	huge := d.Marks(1 << 62)
	if huge.Low <= 0 || huge.Low >= huge.Resume {
		t.Errorf("huge marks %+v", huge)
	}
}

// TestNoteChecksBeforeTheMark: announced writes that could reach the
// next mark down make Note read the volume at once; writes well within
// the headroom read nothing.
func TestNoteChecksBeforeTheMark(t *testing.T) {
	m, v, got := newMonitor(t, 300*mib) // headroom to low: 200 MiB
	reads := v.reads
	m.Note(100 * mib)
	if v.reads != reads {
		t.Fatalf("Note within the headroom read the volume")
	}
	v.setFree(90 * mib) // a writer the monitor was not told of
	m.Note(100*mib + 1) // past the headroom: read now
	if v.reads != reads+1 || m.State() != Low {
		t.Fatalf("after Note past the headroom: reads %d, state %s", v.reads-reads, m.State())
	}
	if len(*got) != 1 || (*got)[0].State != Low {
		t.Fatalf("transitions %v", *got)
	}
	// In low, the headroom is to the critical mark (40 MiB).
	v.setFree(10 * mib)
	m.Note(30 * mib)
	if m.State() != Low {
		t.Fatalf("Note within the headroom changed the state")
	}
	m.Note(11 * mib)
	if m.State() != Critical {
		t.Fatalf("state %s after Note past the critical headroom", m.State())
	}
	// Critical: Note never reads (the poll brings it back).
	reads = v.reads
	for range 1000 {
		m.Note(mib)
	}
	if v.reads != reads {
		t.Errorf("Note read the volume %d times in critical", v.reads-reads)
	}
}

// TestPollErrorKeepsTheState: a failed reading changes nothing.
func TestPollErrorKeepsTheState(t *testing.T) {
	m, v, got := newMonitor(t, 80*mib)
	v.mu.Lock()
	v.err = errors.New("gone")
	v.mu.Unlock()
	if _, err := m.Poll(); err == nil {
		t.Fatal("no error")
	}
	if m.State() != Low || len(*got) != 0 {
		t.Errorf("state %s, transitions %v", m.State(), *got)
	}
}

// TestUnsubscribe: a cancelled subscriber hears nothing more.
func TestUnsubscribe(t *testing.T) {
	v := &fakeVolume{u: Usage{Free: 500 * mib, Size: 1000 * mib}}
	m, _ := New(v.source, th)
	n := 0
	cancel := m.Subscribe(func(Transition) { n++ })
	v.setFree(10 * mib)
	m.Poll()
	cancel()
	v.setFree(500 * mib)
	m.Poll()
	if n != 1 {
		t.Errorf("heard %d transitions, want 1", n)
	}
}

// TestThresholdsCheck names what is wrong with thresholds without
// hysteresis.
func TestThresholdsCheck(t *testing.T) {
	bad := []Thresholds{
		{LowPercent: 10, CriticalPercent: 10, ResumePercent: 15},
		{LowPercent: 10, CriticalPercent: 5, ResumePercent: 10},
		{LowPercent: 10, CriticalPercent: 0, ResumePercent: 15},
		{LowPercent: 10, CriticalPercent: 5, ResumePercent: 95},
		{LowPercent: 10, CriticalPercent: 5, ResumePercent: 15, LowFloor: 10, CriticalFloor: 10, ResumeFloor: 20},
		{LowPercent: 10, CriticalPercent: 5, ResumePercent: 15, LowFloor: 10, CriticalFloor: 5, ResumeFloor: 0},
		{LowPercent: 10, CriticalPercent: 5, ResumePercent: 15, LowFloor: -1},
	}
	for _, b := range bad {
		if err := b.Check(); err == nil {
			t.Errorf("%+v: no error", b)
		}
		if _, err := New((&fakeVolume{}).source, b); err == nil {
			t.Errorf("New(%+v): no error", b)
		}
	}
	if err := th.Check(); err != nil {
		t.Errorf("percents only: %v", err)
	}
}

// TestStatfsSource reads a real volume.
func TestStatfsSource(t *testing.T) {
	u, err := StatfsSource(os.TempDir())()
	if err != nil {
		t.Fatal(err)
	}
	if u.Size <= 0 || u.Free < 0 || u.Free > u.Size {
		t.Errorf("usage %+v", u)
	}
	if _, err := StatfsSource("/nonexistent/aptl")(); err == nil || !strings.Contains(err.Error(), "/nonexistent/aptl") {
		t.Errorf("missing path: %v", err)
	}
}
