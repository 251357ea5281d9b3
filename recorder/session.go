package recorder

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/sessionkey"
	"github.com/aptl/aptl-kali-capture/ship"
)

// Session is one session's open record.
//
// Lifecycle: Create writes the headers; Input, Output and Resize append while
// the session runs; Close writes the trailer, fsyncs and releases the files.
// A Session is safe for concurrent use.
type Session struct {
	dirs  *sessionDirs     // set by create; the open folders; closed by Close
	now   func() time.Time // set by create; time.Now outside tests
	start time.Time        // set by create; monotonic base of every delay

	// in and out count accepted bytes. They are added under mu but read
	// without it, so Bytes never waits behind a slow disk write.
	in, out atomic.Int64

	opts Options // set by create
	tty  string  // set by create; the PTY slave's name, "" without a PTY
	// runID is set by create; the witnesses' budget counts by it.
	runID string

	// mu serializes all writes so the typescript keeps bytes in the order
	// they were observed, and the integrity log follows that order; it
	// protects the following.
	mu     sync.Mutex
	ts, tm *digestFile       // set by create; closed by Close
	log    *os.File          // the integrity log; set by create; closed by Close
	chain  *integrity.Writer // writes log
	last   time.Duration     // elapsed time of the last I/O or S entry
	line   []byte            // scratch for timing lines, reused across writes
	err    error             // first write failure; returned by every later write
	closed bool              // set by Close

	counted         map[string]int64 // every byte per log stream, stored or not
	stored          int64            // bytes stored in the typescript body
	capped          bool             // the size cap was reached
	unsynced        int64            // bytes recorded since the last fsync started
	syncing         *pendingSync     // the fsync running beside the copiers, if any (syncer.go)
	sinceCheckpoint int64            // bytes recorded since the last signed head
	checkpointSeq   uint64           // the chain's length at the last signed head
	tick            *time.Timer      // pending onTick; nil when none is armed
	control         controlState     // control-event bound and coalescing (control.go)
	witnesses       []Witness        // opened by create, closed by Close (witness.go)
	witnessDirty    bool             // a witness has evidence no checkpoint signed yet
	reserve         *os.File         // the closing records' space (reserve.go); nil once drawn on or released
	tailed          bool             // the reserve became the record files' tails
	sealed          bool             // the close record and its checkpoint are written: the manifest follows
	signer          gossh.Signer     // signs the chain and the manifest: key, or the host key
	key             *sessionkey.Key  // the session's own key; destroyed by Close
	keyFallback     error            // why the host key signs though a pool was set
	disk            diskQueue        // the volume's transitions not recorded yet (disk.go)
	ship            *ship.Stream     // the session's shipping, if Options.Shipper (ship.go)
	shippedUnsigned uint64           // shipped records since the last signed head
}

// Dir returns the session directory, <root>/<run_id>/<session_id>.
func (s *Session) Dir() string { return s.dirs.path }

// Input appends p, bytes sent to the PTY, to the typescript and an
// `I <delay> <n>` entry to the timing file.
func (s *Session) Input(p []byte) error { return s.record('I', vocab.StreamIn, p, &s.in) }

// Output appends p, bytes read from the PTY (or a session's stdout), to the
// typescript and an `O <delay> <n>` entry to the timing file.
func (s *Session) Output(p []byte) error { return s.record('O', vocab.StreamOut, p, &s.out) }

// Stderr records the stderr of a session without a PTY: output to script's
// format, its own stream in the integrity log.
func (s *Session) Stderr(p []byte) error { return s.record('O', vocab.StreamErr, p, &s.out) }

// Event appends an SSH control event (a request, a refusal, a signal) to
// the integrity log, in order with the bytes.
func (s *Session) Event(typ string, attrs map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.fail(s.chain.Append(typ, withExactValues(attrs))); err != nil {
		return err
	}
	return s.dirtied(0)
}

// Bytes reports how many input and output bytes were recorded so far.
func (s *Session) Bytes() (in, out int64) { return s.in.Load(), s.out.Load() }

// Annotate appends provenance headers learned after Create, for example
// whom the launcher ran the process as, which is known only once it started.
func (s *Session) Annotate(headers ...Header) error {
	if err := checkHeaderNames(headers); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.recordResizes(); err != nil {
		return err
	}
	attrs := make(map[string]string, len(headers))
	for _, h := range headers {
		attrs[h.Name] = h.Value
	}
	err := errors.Join(s.writeTiming(scriptfmt.AppendHeaders(nil, headers)), s.chain.Append(vocab.TypeAnnotate, withExactValues(attrs)))
	if s.fail(err) != nil {
		return err
	}
	return s.dirtied(0)
}

// record writes p straight to the typescript file, then its timing entry,
// and accounts for it in the integrity log. There is no user-space buffer,
// so a crash of this process loses nothing that record already accepted.
// Past the size cap the bytes are only counted and digested; bytes a
// failed write did not store become a gap record with their digest.
func (s *Session) record(stream byte, logStream string, p []byte, count *atomic.Int64) error {
	capped := false
	// Deferred before the unlock, so it runs after it: the callback (a
	// log line) never holds up the session's recording.
	defer func() {
		if capped && s.opts.OnSizeLimit != nil {
			s.opts.OnSizeLimit(s.opts.MaxBytes)
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil || len(p) == 0 {
		return err
	}
	// A window change goes into the record before the bytes that follow it.
	if err := s.recordResizes(); err != nil {
		return err
	}
	s.counted[logStream] += int64(len(p))
	wasCapped := s.capped
	stored, rest := s.storable(p)
	capped = s.capped && !wasCapped
	off := s.ts.size
	n, werr := s.ts.Write(stored)
	count.Add(int64(n))
	s.stored += int64(n)
	var errs []error
	if n > 0 {
		// Time whatever reached the typescript, even after a short write,
		// so the two files stay aligned for scriptreplay.
		s.line = scriptfmt.AppendTiming(s.line[:0], stream, s.delay(), n)
		// Appended only when non-nil: the common path allocates nothing.
		if derr := s.chain.Data(logStream, off, stored[:n]); derr != nil {
			errs = append(errs, derr)
		}
		if terr := s.writeTiming(s.line); terr != nil {
			errs = append(errs, terr, s.chain.TimingGap(logStream, n, terr))
		}
	}
	if werr != nil {
		werr = fmt.Errorf("recorder: write typescript: %w", werr)
		errs = append(errs, werr, s.chain.Gap(logStream, stored[n:], map[string]string{vocab.AttrReason: vocab.GapWriteFailed, "error": werr.Error()}))
	}
	if len(rest) > 0 {
		errs = append(errs, s.chain.Data(logStream, -1, rest))
	}
	if err := s.fail(errors.Join(errs...)); err != nil {
		return err
	}
	return s.dirtied(len(p))
}

// writable returns ErrClosed after Close, else the sticky write failure.
// Callers hold mu.
func (s *Session) writable() error {
	if s.closed {
		return ErrClosed
	}
	return s.err
}

// fail makes a non-nil err sticky: once the record is incomplete, every later
// write reports the same failure. Callers hold mu.
// The first failure draws on the reserve, before anything else on the
// volume takes the room it gives back (reserve.go).
func (s *Session) fail(err error) error {
	if err != nil {
		if s.err == nil {
			s.drawOnReserve()
		}
		s.err = err
	}
	return err
}

// delay returns the time since the previous I/O or S entry. Like script,
// which subtracts microsecond timevals, it differences elapsed times
// truncated to the microsecond, so the delays sum to the elapsed time
// without drift. Callers hold mu.
func (s *Session) delay() time.Duration { return s.delayAt(s.now()) }

// delayAt is delay for an entry observed at t, not later than now.
func (s *Session) delayAt(t time.Time) time.Duration {
	el := max(s.elapsedAt(t), s.last)
	d := el - s.last
	s.last = el
	return d
}

// elapsedAt returns t's offset from the start, truncated to the microsecond.
// time.Time.Sub uses the monotonic readings, as script's gettime_monotonic.
func (s *Session) elapsedAt(t time.Time) time.Duration {
	return t.Sub(s.start).Truncate(time.Microsecond)
}

func (s *Session) writeTiming(b []byte) error {
	if err := s.tm.writeWhole(b); err != nil {
		return fmt.Errorf("recorder: write timing: %w", err)
	}
	return nil
}

// writeStart writes the typescript header line and the start H entries.
func (s *Session) writeStart(m Meta, wall time.Time) error {
	if err := s.ts.writeWhole(scriptfmt.StartLine(m.start(), wall)); err != nil {
		return fmt.Errorf("recorder: write typescript header: %w", err)
	}
	return s.writeTiming(scriptfmt.AppendHeaders(nil, startHeaders(m, wall)))
}

// Close writes the trailer (`\nScript done on <time> [COMMAND_EXIT_CODE="N"]\n`),
// then `H 0.000000 DURATION <secs>`, `H 0.000000 EXIT_CODE N` and the extra
// headers, then the integrity log's close record (the extras as its attrs)
// and its final signed checkpoint; it fsyncs the three files and their
// directories, and closes the files.
//
// Close always releases the files. An invalid extra header name is a
// programming error: the extras are skipped and the error returned. After a
// write failure the trailer and the close record are still written, on the
// session's reserve when the disk is full, and that failure is returned
// again. A second Close returns nil and writes nothing.
func (s *Session) Close(exitCode int, extra ...Header) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.tick != nil {
		s.tick.Stop()
	}
	nameErr := checkHeaderNames(extra)
	if nameErr != nil {
		extra = nil
	}
	// Window changes not recorded yet, and control events past the bound,
	// are stated before the trailer and the close record.
	if s.err == nil && s.recordResizes() == nil {
		s.fail(s.dropControlRecords())
	}
	// The volume's transitions heard and not recorded yet, too.
	s.unwatchDisk()
	s.recordDiskLocked()
	// After a write failure too: the trailer is written on the reserve
	// (reserve.go), whole or not at all, after the bytes that were stored.
	failure := s.err
	errs := []error{failure, nameErr, s.writeTrailer(exitCode, extra)}
	errs = append(errs, s.closeEvidence(exitCode, extra, failure), s.syncAndClose())
	return errors.Join(errs...)
}

// writeTrailer writes the closing line of the typescript and the closing H
// entries, in the order of script's log_close.
func (s *Session) writeTrailer(exitCode int, extra []Header) error {
	now := s.now()
	done := scriptfmt.DoneLine(now, exitCode)
	if err := s.withReserve(func() error { return s.ts.writeWhole(done) }); err != nil {
		return fmt.Errorf("recorder: write typescript trailer: %w", err)
	}
	hs := []Header{
		{Name: vocab.ScriptDuration, Value: string(scriptfmt.AppendSeconds(nil, s.elapsedAt(now)))},
		{Name: vocab.ScriptExitCode, Value: strconv.Itoa(exitCode)},
	}
	closing := scriptfmt.AppendHeaders(nil, append(hs, extra...))
	return s.withReserve(func() error { return s.writeTiming(closing) })
}

// syncAndClose makes the record durable: the three files, then, for a
// sealed session, its signed manifest (manifest.go), then the folders
// holding their entries up to the run folder, so a session that closed
// cleanly survives a host crash and its id stays used.
func (s *Session) syncAndClose() error {
	// An fsync still running beside the copiers ends before the files
	// close; its failure is reported with the others.
	errs := []error{s.reapSync(true)}
	s.unwatchDisk()
	// The reserve goes first: on a full volume, the room its tails did
	// not take is the manifest's.
	s.releaseReserve()
	synced := syncFiles(s.recordFiles())
	errs = append(errs, synced)
	if s.sealed && synced == nil {
		// While the log is open, its lock held: a verifier that finds
		// the recorder gone finds the manifest too.
		errs = append(errs, writeManifest(s.dirs, s.signer, s.recordedDigests()))
	}
	// Sealed: the session's own key signs nothing more, and goes. Not
	// sealed (the closing records not all written): the key stays for the
	// next start's recovery, which signs the cut with it.
	errs = append(errs, s.sealKey(s.sealed), s.closeRecordFiles(), s.dirs.sync(), s.dirs.close())
	// Named and durable: the stream ships the files' ends, and whole.
	s.endShipping()
	return errors.Join(errs...)
}

// closeRecordFiles closes whichever record files are open.
func (s *Session) closeRecordFiles() error {
	var errs []error
	files := []*os.File{s.log}
	if s.ts != nil {
		files = append(files, s.ts.File)
	}
	if s.tm != nil {
		files = append(files, s.tm.File)
	}
	for _, f := range files {
		if f == nil {
			continue
		}
		if err := f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("recorder: close: %w", err))
		}
	}
	return errors.Join(errs...)
}
