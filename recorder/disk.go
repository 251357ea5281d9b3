package recorder

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/aptl/aptl-kali-capture/internal/diskstate"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/internal/witnessbudget"
)

// The capture volume's disk states (internal/diskstate; docs/OPERATING.md, "Disk
// states") reach a session's record in three ways: Create refuses a new
// session while the volume is critical; every transition is a disk record
// in the chain of each open session (and a session started while the
// volume was not ok says so right after its open record); and the
// witnesses ask the session's gate before they store (Storing), so a low
// volume stops them while the transcript goes on.

// ErrDiskCritical is what a DiskCriticalError Is: Create refused the
// session because the capture volume is critical.
var ErrDiskCritical = errors.New("recorder: the capture volume is critically low on space")

// DiskCriticalError is Create's refusal of a session on a critical volume,
// with the reading it was decided on.
type DiskCriticalError struct {
	Free, Below int64 // bytes free, and the critical mark
}

func (e *DiskCriticalError) Error() string {
	return fmt.Sprintf("%v: %d bytes free, below %d", ErrDiskCritical, e.Free, e.Below)
}

func (e *DiskCriticalError) Is(target error) bool { return target == ErrDiskCritical }

// checkDisk refuses a session while the volume is critical. A critical
// state is read again first, so a volume freed since the last poll
// starts sessions at once.
func checkDisk(m *diskstate.Monitor) error {
	if m == nil || m.State() != diskstate.Critical {
		return nil
	}
	st, err := m.Poll()
	if err == nil && st.State != diskstate.Critical {
		return nil
	}
	return &DiskCriticalError{Free: st.Usage.Free, Below: st.Marks.Critical}
}

// diskAttrs are a disk record's attributes for a reading in state st,
// after from ("" at a session's start).
func diskAttrs(from diskstate.State, st diskstate.Status) map[string]string {
	a := map[string]string{
		vocab.AttrDiskState:        string(st.State),
		vocab.AttrDiskFree:         strconv.FormatInt(st.Usage.Free, 10),
		vocab.AttrDiskSize:         strconv.FormatInt(st.Usage.Size, 10),
		vocab.AttrDiskLowMark:      strconv.FormatInt(st.Marks.Low, 10),
		vocab.AttrDiskCriticalMark: strconv.FormatInt(st.Marks.Critical, 10),
		vocab.AttrDiskResumeMark:   strconv.FormatInt(st.Marks.Resume, 10),
	}
	if from != "" {
		a[vocab.AttrDiskFrom] = string(from)
	}
	return a
}

// maxPendingDisk bounds the transitions a session holds before it records
// them: the monitor polls about once a second, so more than this many
// waiting means the session's writes are stuck; the oldest are dropped
// and the next record still says the state it moved to.
const maxPendingDisk = 64

// diskQueue holds the transitions the monitor told a session of, until
// the session records them under its own lock: the monitor must not wait
// for one session's disk writes before telling the next.
type diskQueue struct {
	mu      sync.Mutex
	pending []diskstate.Transition
	cancel  func() // ends the subscription; nil when none
}

// watchDisk subscribes the session to the volume's transitions, and
// records the state it starts in when that is not ok. Callers hold mu or
// run before the session is shared (create).
func (s *Session) watchDisk() error {
	m := s.opts.Disk
	if m == nil {
		return nil
	}
	s.disk.cancel = m.Subscribe(func(t diskstate.Transition) {
		s.disk.mu.Lock()
		if len(s.disk.pending) == maxPendingDisk {
			s.disk.pending = s.disk.pending[1:]
		}
		s.disk.pending = append(s.disk.pending, t)
		s.disk.mu.Unlock()
		go s.recordDisk()
	})
	if st := m.Status(); st.State != diskstate.OK {
		return s.chain.Append(vocab.TypeDisk, diskAttrs("", st))
	}
	return nil
}

// recordDisk writes the transitions waiting, in the order the monitor
// heard them, as disk records, and has them signed soon.
func (s *Session) recordDisk() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.recordDiskLocked() == 0 {
		return
	}
	s.dirtied(0)
}

// recordDiskLocked writes the transitions waiting and returns how many it
// wrote; a session whose writes failed records none. Close calls it
// before the close record. Callers hold mu.
func (s *Session) recordDiskLocked() int {
	s.disk.mu.Lock()
	ts := s.disk.pending
	s.disk.pending = nil
	s.disk.mu.Unlock()
	if s.err != nil {
		return 0
	}
	for i, t := range ts {
		if s.fail(s.chain.Append(vocab.TypeDisk, diskAttrs(t.From, t.Status))) != nil {
			return i
		}
	}
	return len(ts)
}

// unwatchDisk ends the session's subscription.
func (s *Session) unwatchDisk() {
	if s.disk.cancel != nil {
		s.disk.cancel()
		s.disk.cancel = nil
	}
}

// Storing says whether a witness may store an item now and, when not, why.
type Storing int

const (
	StoreOK           Storing = iota
	StoreDiskLow              // the capture volume is low or critical
	StoreRunBudget            // the witnesses' budget of the session's run is spent
	StoreVolumeBudget         // the witnesses' budget of the volume is spent
)

// WitnessGate is asked by a session's witness before it stores need more
// bytes; an admitted item is counted against the budgets.
type WitnessGate interface{ Admit(need int64) Storing }

// sessionGate is a session's WitnessGate: the volume's state, then the
// budgets.
type sessionGate struct {
	disk *diskstate.Monitor
	run  string
	opts *Options
}

func (g sessionGate) Admit(need int64) Storing {
	if g.disk != nil {
		if g.disk.State() != diskstate.OK {
			return StoreDiskLow
		}
		g.disk.Note(need)
		if g.disk.State() != diskstate.OK {
			return StoreDiskLow
		}
	}
	if b := g.opts.Budget; b != nil {
		switch b.Take(g.run, need) {
		case witnessbudget.Run:
			return StoreRunBudget
		case witnessbudget.Volume:
			return StoreVolumeBudget
		}
	}
	return StoreOK
}
