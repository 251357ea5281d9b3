// Package pcap is the sidecar's packet witness: one capture engine for
// every session (engine_linux.go), each session's packets in its own
// rotated pcapng files (files.go) for exactly its window (tap.go), bound
// into the session's integrity chain through the recorder's witness hook
// (recorder/witness.go). The examiner's side is examine/pcap.go.
package pcap

import (
	"log/slog"
	"os"
	"sync"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/internal/witnessfs"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// Source is the pcap class for recorder.Options.Witnesses. Its engine is
// set once the listener's port is known (SetEngine); until then, or when
// the engine could not start, sessions are recorded without packets and
// their open records say why.
type Source struct {
	limits Limits
	log    *slog.Logger

	mu     sync.Mutex
	eng    engine // nil while unavailable
	reason string // why eng is nil
}

// NewSource returns the pcap class, unavailable for the given reason until
// SetEngine.
func NewSource(limits Limits, log *slog.Logger, reason string) *Source {
	return &Source{limits: limits, log: log, reason: reason}
}

// SetEngine makes the source capture with eng, or, with eng nil, records
// that it cannot and why.
func (s *Source) SetEngine(eng *Engine, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if eng == nil {
		s.eng, s.reason = nil, reason
		return
	}
	s.eng, s.reason = eng, ""
}

// Class implements recorder.WitnessSource.
func (s *Source) Class() string { return vocab.ClassPcap }

// Open implements recorder.WitnessSource.
func (s *Source) Open(mkdir func() (*os.File, error), notify func()) (recorder.Witness, map[string]string) {
	s.mu.Lock()
	eng, reason := s.eng, s.reason
	s.mu.Unlock()
	if eng == nil {
		return nil, map[string]string{vocab.AttrPcap: vocab.PcapUnavailable, vocab.AttrPcapReason: reason}
	}
	dir, err := mkdir()
	if err != nil {
		s.log.Warn("pcap: session folder", "err", err.Error())
		return nil, map[string]string{vocab.AttrPcap: vocab.PcapUnavailable, vocab.AttrPcapReason: err.Error()}
	}
	files := &fileSet{limits: s.limits, create: func(name string) (*os.File, error) { return witnessfs.CreateIn(dir, name) }}
	t := newTap(eng, files, notify)
	return &closingTap{tap: t, dir: dir}, map[string]string{vocab.AttrPcap: vocab.PcapOn}
}

// closingTap releases the pcap folder's fd when the session closes.
type closingTap struct {
	*tap
	dir *os.File
}

func (c *closingTap) Close(emit recorder.Emit) (map[string]string, error) {
	defer c.dir.Close()
	if !c.started {
		// Create failed before the window opened: nothing to close.
		return nil, nil
	}
	return c.tap.Close(emit)
}
