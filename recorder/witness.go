package recorder

import (
	"errors"
	"fmt"
	"maps"
	"os"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Witnesses are evidence sources beside the terminal (packets now; audit
// events later) that are bound into the same integrity chain, so one
// signature covers terminal bytes and what the witness saw together. A
// WitnessSource is shared by all sessions (one capture engine); Open gives
// one session its Witness for exactly that session's window: from just
// before the open record (Start) to just before the close record (Close).
//
// Lock order: the recorder calls a Witness while holding the session's
// mutex; a Witness must therefore never call back into the Session
// synchronously from its own locks. It reports new, unsigned evidence
// through the notify function Open receives, which it may call from any
// goroutine without holding its own locks.

// Emit appends a record of the witness's to the session's chain.
type Emit func(typ string, attrs map[string]string) error

// WitnessSource opens a session's witness of one class.
type WitnessSource interface {
	// Class names the witness: its folder in the session folder, its
	// record attributes' prefix, and its name in APTL_CAPTURE_CLASSES.
	Class() string
	// Open returns the session's witness and the attributes the open
	// record carries about it. A source that cannot witness (no
	// privilege, no engine) returns a nil Witness and attributes that say
	// why: the session still runs and is still transcribed.
	Open(o WitnessOpen) (Witness, map[string]string)
}

// WitnessOpen is what a session gives the witness it opens.
type WitnessOpen struct {
	// Mkdir makes the class's folder in the session folder, 0700,
	// without following links; it may be called once.
	Mkdir func() (*os.File, error)
	// Notify asks for a checkpoint soon.
	Notify func()
	// Gate is asked before each item is stored (disk.go): the volume's
	// state and the budgets across sessions.
	Gate WitnessGate
}

// Witness is one session's witness, owned by the recorder once opened.
type Witness interface {
	// Start begins the session's window; called once, just before the
	// open record is written. The attributes it returns replace the open
	// record's of the same names: a witness that could not open its
	// window says so there (pcap unavailable, and why).
	Start() map[string]string
	// Checkpoint makes the witness's files durable, emits a record for
	// anything it finished since the last call, and returns the
	// attributes the signed checkpoint carries (the current file's size
	// and running digest).
	Checkpoint(emit Emit) (map[string]string, error)
	// Close ends the window, emits the witness's last records (finished
	// files, gaps) and returns the attributes of the close record.
	Close(emit Emit) (map[string]string, error)
}

// AuditBinder is a Witness that attributes evidence by the kernel's audit
// session id. tty is the session's PTY slave (/dev/pts/N), "" without a
// PTY: the terminal on which the kernel's records confirm the id.
type AuditBinder interface{ BindAuditSession(ses uint32, tty string) }

// witnessDirPrefix marks a witness folder in sessionDirs.made.
const witnessDirPrefix = "witness:"

// openWitnesses opens every configured witness and adds what each says
// about itself to the open record's attributes.
func (s *Session) openWitnesses(open map[string]string) {
	for _, src := range s.opts.Witnesses {
		class := src.Class()
		mkdir := func() (*os.File, error) {
			f, err := safefs.MkdirBeneath(s.dirs.session, class, dirMode, false)
			if err != nil {
				return nil, fmt.Errorf("recorder: %s folder: %w", class, err)
			}
			s.dirs.made = append(s.dirs.made, witnessDirPrefix+class)
			return f, nil
		}
		w, attrs := src.Open(WitnessOpen{Mkdir: mkdir, Notify: s.witnessDirtied, Gate: sessionGate{disk: s.opts.Disk, run: s.runID, opts: &s.opts}})
		maps.Copy(open, attrs)
		if w != nil {
			s.witnesses = append(s.witnesses, w)
		}
	}
}

// startWitnesses begins every witness's window and adds to the open
// record's attributes what each says of its start.
func (s *Session) startWitnesses(open map[string]string) {
	for _, w := range s.witnesses {
		maps.Copy(open, w.Start())
	}
}

// witnessDirtied is the notify function of the session's witnesses: new
// evidence gets a checkpoint within syncInterval, as terminal bytes do.
func (s *Session) witnessDirtied() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.witnessDirty = true
	s.armTick()
}

// emit appends a witness's record to the chain. Callers hold mu.
func (s *Session) emit(typ string, attrs map[string]string) error {
	return s.chain.Append(typ, withExactValues(attrs))
}

// witnessCheckpoint collects each witness's records and checkpoint
// attributes into a. Callers hold mu.
func (s *Session) witnessCheckpoint(a map[string]string) error {
	var errs []error
	for _, w := range s.witnesses {
		attrs, err := w.Checkpoint(s.emit)
		maps.Copy(a, attrs)
		errs = append(errs, err)
	}
	s.witnessDirty = false
	return errors.Join(errs...)
}

// closeWitnesses ends every witness's window and adds its close
// attributes to a. A witness that fails to close says so in a, and the
// close record is still written. Callers hold mu.
func (s *Session) closeWitnesses(a map[string]string) {
	for _, w := range s.witnesses {
		attrs, err := w.Close(s.emit)
		maps.Copy(a, attrs)
		if err != nil {
			a[vocab.AttrWitnessError] = err.Error()
		}
	}
	s.witnesses = nil
}

// abortWitnesses releases the witnesses of a session Create could not
// finish; nothing they would emit can be recorded.
func (s *Session) abortWitnesses() {
	for _, w := range s.witnesses {
		w.Close(func(string, map[string]string) error { return nil })
	}
	s.witnesses = nil
}
