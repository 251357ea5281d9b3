// Package pcap is the sidecar's packet witness: one capture engine for
// every session (engine_linux.go), each session's packets in its own
// rotated pcapng files (files.go) for exactly its window (tap.go), bound
// into the session's integrity chain through the recorder's witness hook
// (recorder/witness.go). The examiner's side is evidence/pcap.go.
package pcap

import (
	"log/slog"
	"os"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/witness/witnessfs"
)

// Source is the pcap class for recorder.Options.Witnesses. Its engine is
// set once the listener's port is known (SetEngine); until then, or when
// the engine could not start, sessions are recorded without packets and
// their open records say why.
type Source = witnessfs.Source[Engine]

// NewSource returns the pcap class, unavailable for the given reason until
// SetEngine.
func NewSource(limits Limits, log *slog.Logger, reason string) *Source {
	names := witnessfs.SourceNames{Class: vocab.ClassPcap, State: vocab.AttrPcap, Reason: vocab.AttrPcapReason, On: vocab.PcapOn, Unavailable: vocab.PcapUnavailable, Disabled: vocab.PcapDisabled}
	return witnessfs.NewSource(names, log, reason, func(eng *Engine, dir *os.File, o recorder.WitnessOpen) recorder.Witness {
		files := newFileSet(limits, func(name string) (*os.File, error) { return safefs.CreateIn(dir, name, 0o600) }, o.Gate)
		return &closingTap{tap: newTap(eng, files, o.Notify), dir: dir}
	})
}

// closingTap releases the pcap folder's fd when the session closes.
type closingTap struct {
	*tap
	dir *os.File
}

func (c *closingTap) Close(emit recorder.Emit) (map[string]string, error) {
	defer c.dir.Close()
	return c.tap.Close(emit)
}
