package witnessfs

import (
	"log/slog"
	"os"
	"sync"

	"github.com/aptl/aptl-kali-capture/recorder"
)

// SourceNames are a witness class's names, the only words in which the
// classes' sources differ.
type SourceNames struct {
	// Class names the class (vocab.ClassPcap): recorder.WitnessSource's
	// Class, and the prefix of the source's log lines.
	Class string
	// State and Reason are the open record's attributes that say whether
	// the class witnesses the session (vocab.AttrPcap) and, when it does
	// not, why (vocab.AttrPcapReason).
	State, Reason string
	// On, Unavailable and Disabled are State's values (vocab.PcapOn,
	// vocab.PcapUnavailable, vocab.PcapDisabled): disabled is a choice
	// (Disable), unavailable a failure.
	On, Unavailable, Disabled string
}

// Source is one witness class for recorder.Options.Witnesses: every
// session's witness of the class comes from one engine of type E, which
// starts after the source is made (SetEngine). Until then, or when the
// engine could not start or stopped, sessions are recorded without the
// witness and their open records say why.
type Source[E any] struct {
	names SourceNames
	log   *slog.Logger
	// witness makes a session's witness from the engine; dir is the
	// class's folder in the session folder, which the witness closes
	// when the session closes; o carries its notify and gate.
	witness func(eng *E, dir *os.File, o recorder.WitnessOpen) recorder.Witness

	mu       sync.Mutex
	eng      *E     // nil while unavailable or disabled
	reason   string // why eng is nil
	disabled bool   // by choice (Disable): no engine is set after
}

// NewSource returns the class, unavailable for reason until SetEngine;
// witness makes each session's witness once the engine runs.
func NewSource[E any](names SourceNames, log *slog.Logger, reason string, witness func(eng *E, dir *os.File, o recorder.WitnessOpen) recorder.Witness) *Source[E] {
	return &Source[E]{names: names, log: log, witness: witness, reason: reason}
}

// SetEngine makes the source witness with eng, or, with eng nil, records
// that it cannot and why.
func (s *Source[E]) SetEngine(eng *E, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disabled {
		return
	}
	if eng == nil {
		s.eng, s.reason = nil, reason
		return
	}
	s.eng, s.reason = eng, ""
}

// Disable makes the source witness no session, by choice, for reason:
// the open records say the class is disabled and why.
func (s *Source[E]) Disable(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eng, s.reason, s.disabled = nil, reason, true
}

// Class implements recorder.WitnessSource.
func (s *Source[E]) Class() string { return s.names.Class }

// Open implements recorder.WitnessSource.
func (s *Source[E]) Open(o recorder.WitnessOpen) (recorder.Witness, map[string]string) {
	s.mu.Lock()
	eng, reason, disabled := s.eng, s.reason, s.disabled
	s.mu.Unlock()
	if disabled {
		return nil, map[string]string{s.names.State: s.names.Disabled, s.names.Reason: reason}
	}
	if eng == nil {
		return nil, s.unavailable(reason)
	}
	dir, err := o.Mkdir()
	if err != nil {
		s.log.Warn(s.names.Class+": session folder", "err", err.Error())
		return nil, s.unavailable(err.Error())
	}
	return s.witness(eng, dir, o), map[string]string{s.names.State: s.names.On}
}

// unavailable are the open record's attributes of a session the class
// does not witness, and why.
func (s *Source[E]) unavailable(reason string) map[string]string {
	return map[string]string{s.names.State: s.names.Unavailable, s.names.Reason: reason}
}

var _ recorder.WitnessSource = (*Source[struct{}])(nil)
