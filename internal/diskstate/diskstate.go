// Package diskstate keeps the state of the capture volume: ok, low or
// critical, from the free space statfs(2) reports for the capture root,
// polled about once a second and checked at once when writers say a
// large write is coming (Note). The states and what they stop are the
// sidecar's (docs/OPERATING.md, "Disk states"): low stops the witnesses from
// storing, critical also refuses new sessions; the transcript is never
// stopped by either.
//
// Each state is left for a better one only above a higher mark than the
// one that entered it (hysteresis), so a volume hovering at a mark does
// not flap: ok turns low below the low mark and critical below the
// critical mark; critical turns low only at the low mark or above, and
// low (or critical) turns ok only at the resume mark or above.
package diskstate

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// State is the volume's state; its values are vocab's (the disk record's
// state attribute, the readiness file's disk key).
type State string

const (
	OK       State = vocab.DiskOK
	Low      State = vocab.DiskLow
	Critical State = vocab.DiskCritical
)

// Thresholds are the settings the marks are made of: each mark is the
// larger of a share of the volume's size (percent) and an absolute floor
// (bytes), so a large volume keeps a share free and a small one at least
// the floor.
type Thresholds struct {
	LowPercent, CriticalPercent, ResumePercent int
	LowFloor, CriticalFloor, ResumeFloor       int64
}

// DefaultThresholds returns the defaults: low below 10% or 256 MiB free,
// critical below 5% or 64 MiB, ok again at 15% and 384 MiB. 64 MiB is a
// thousand sessions' reserves of their closing records
// (recorder/reserve.go) and several seconds of a fast transcript; 256 MiB
// leaves the transcripts room for minutes after the witnesses stop. A
// volume smaller than the floors is low from the start: set smaller floors
// for it.
func DefaultThresholds() Thresholds {
	return Thresholds{
		LowPercent: 10, CriticalPercent: 5, ResumePercent: 15,
		LowFloor: 256 << 20, CriticalFloor: 64 << 20, ResumeFloor: 384 << 20,
	}
}

// Check reports thresholds that cannot give hysteresis: the percents must
// rise from critical to low to resume, within 1..90, and so must the
// floors, except that floors may all be 0 (percents only).
func (t Thresholds) Check() error {
	for _, p := range []struct {
		name string
		v    int
	}{{"critical", t.CriticalPercent}, {"low", t.LowPercent}, {"resume", t.ResumePercent}} {
		if p.v < 1 || p.v > 90 {
			return fmt.Errorf("%s percent %d: must be from 1 to 90", p.name, p.v)
		}
	}
	if !(t.CriticalPercent < t.LowPercent && t.LowPercent < t.ResumePercent) {
		return fmt.Errorf("percents critical %d, low %d, resume %d: each must be above the one before", t.CriticalPercent, t.LowPercent, t.ResumePercent)
	}
	if t.CriticalFloor < 0 || t.LowFloor < 0 || t.ResumeFloor < 0 {
		return errors.New("floors must not be negative")
	}
	if t.CriticalFloor == 0 && t.LowFloor == 0 && t.ResumeFloor == 0 {
		return nil
	}
	if !(t.CriticalFloor < t.LowFloor && t.LowFloor < t.ResumeFloor) {
		return fmt.Errorf("floors critical %d, low %d, resume %d bytes: each must be above the one before (or all 0)", t.CriticalFloor, t.LowFloor, t.ResumeFloor)
	}
	return nil
}

// Marks are the thresholds resolved for one volume: free bytes below Low
// make it low, below Critical critical, and at Resume or above ok again.
type Marks struct{ Low, Critical, Resume int64 }

// Marks resolves t for a volume of size bytes.
func (t Thresholds) Marks(size int64) Marks {
	mark := func(pct int, floor int64) int64 { return max(size/100*int64(pct)+size%100*int64(pct)/100, floor) }
	return Marks{Low: mark(t.LowPercent, t.LowFloor), Critical: mark(t.CriticalPercent, t.CriticalFloor), Resume: mark(t.ResumePercent, t.ResumeFloor)}
}

// Next is the state that follows cur when free bytes are free.
func Next(cur State, free int64, m Marks) State {
	switch {
	case free < m.Critical:
		return Critical
	case free >= m.Resume:
		return OK
	case cur == OK && free < m.Low:
		return Low
	case cur == Critical && free >= m.Low:
		return Low
	}
	return cur
}

// Usage is what statfs says of the volume: its size and the bytes free to
// an unprivileged writer (f_bavail: ext4's blocks reserved for root are
// not counted, so the sidecar, which runs as root, has a margin beyond).
type Usage struct{ Free, Size int64 }

// Source reads the volume's usage; StatfsSource in production, a fake in
// tests.
type Source func() (Usage, error)

// StatfsSource reads the usage of the volume holding path.
func StatfsSource(path string) Source {
	return func() (Usage, error) {
		var st unix.Statfs_t
		if err := safefs.RetryEINTR(func() error { return unix.Statfs(path, &st) }); err != nil {
			return Usage{}, fmt.Errorf("statfs %s: %w", path, err)
		}
		bs := int64(st.Frsize)
		if bs <= 0 {
			bs = int64(st.Bsize)
		}
		return Usage{Free: int64(st.Bavail) * bs, Size: int64(st.Blocks) * bs}, nil
	}
}

// Status is the volume's state with what it was decided on.
type Status struct {
	State State
	Usage Usage
	Marks Marks
}

// Transition is a change of state; Seq counts the monitor's transitions
// from 1, so subscribers can tell them apart and keep their order.
type Transition struct {
	From State
	Status
	At  time.Time
	Seq uint64
}

// Monitor keeps the state of one volume. State and Note are cheap (atomic
// loads, no system call) and may be called on every write; Poll reads the
// volume. Subscribers hear every transition in order.
type Monitor struct {
	src Source
	th  Thresholds
	now func() time.Time

	state atomic.Pointer[State]
	// headroom is how many bytes writers may still announce (Note) before
	// the volume could reach the next mark down; below 0 Note polls.
	headroom atomic.Int64

	pollMu sync.Mutex // serializes Poll, so transitions are heard in order
	mu     sync.Mutex // protects what follows
	status Status
	seq    uint64
	subs   map[uint64]func(Transition)
	nextID uint64
}

// New reads the volume once and returns its monitor, in the state that
// reading gives (ok unless the volume is already below a mark).
func New(src Source, th Thresholds) (*Monitor, error) {
	if err := th.Check(); err != nil {
		return nil, err
	}
	u, err := src()
	if err != nil {
		return nil, err
	}
	m := &Monitor{src: src, th: th, now: time.Now, subs: map[uint64]func(Transition){}}
	marks := th.Marks(u.Size)
	st := Next(OK, u.Free, marks)
	m.status = Status{State: st, Usage: u, Marks: marks}
	m.state.Store(&st)
	m.headroom.Store(headroom(st, u.Free, marks))
	return m, nil
}

// headroom is the bytes from free to the mark that would worsen st.
func headroom(st State, free int64, m Marks) int64 {
	switch st {
	case OK:
		return free - m.Low
	case Low:
		return free - m.Critical
	}
	return 0 // critical: nothing worse to watch for; Poll keeps it current
}

// State is the state of the last reading.
func (m *Monitor) State() State { return *m.state.Load() }

// Status is the state of the last reading, with its usage and marks.
func (m *Monitor) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

// Thresholds are the settings the marks are made of.
func (m *Monitor) Thresholds() Thresholds { return m.th }

// Note tells the monitor that n bytes are about to be written to the
// volume. It polls at once when the bytes announced since the last poll
// could have taken the volume past its next mark down, so a fast writer
// meets the new state within its own write, not a second later.
func (m *Monitor) Note(n int64) {
	if m.headroom.Add(-n) < 0 && m.State() != Critical {
		m.Poll()
	}
}

// Poll reads the volume and moves to the state its free space gives,
// telling every subscriber of a transition, in the calling goroutine. A
// failed reading keeps the state and is returned.
func (m *Monitor) Poll() (Status, error) {
	m.pollMu.Lock()
	defer m.pollMu.Unlock()
	u, err := m.src()
	if err != nil {
		return m.Status(), err
	}
	marks := m.th.Marks(u.Size)
	m.mu.Lock()
	from := m.status.State
	to := Next(from, u.Free, marks)
	m.status = Status{State: to, Usage: u, Marks: marks}
	st := m.status
	var subs []func(Transition)
	var t Transition
	if to != from {
		m.seq++
		t = Transition{From: from, Status: st, At: m.now(), Seq: m.seq}
		for _, fn := range m.subs {
			subs = append(subs, fn)
		}
	}
	m.mu.Unlock()
	m.state.Store(&to)
	m.headroom.Store(headroom(to, u.Free, marks))
	for _, fn := range subs {
		fn(t)
	}
	return st, nil
}

// Run polls every interval until stop is closed; a failed reading goes
// to onErr (which may be nil) and polling goes on.
func (m *Monitor) Run(stop <-chan struct{}, every time.Duration, onErr func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if _, err := m.Poll(); err != nil && onErr != nil {
				onErr(err)
			}
		}
	}
}

// Subscribe has fn hear every later transition, in order, from the
// goroutine that polled; fn must not block (a session's recorder queues
// it). The returned function ends the subscription.
func (m *Monitor) Subscribe(fn func(Transition)) (cancel func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.nextID
	m.nextID++
	m.subs[id] = fn
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.subs, id)
	}
}
