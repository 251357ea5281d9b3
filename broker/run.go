package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// RefusalNoSessionKey is the refusal of a session the session key pool had
// no key for, where the host key may not stand in (serve --session-keys
// pool): the operator provisions more (keys provision).
const RefusalNoSessionKey = "recording is unavailable: no session key is left to sign the record; session not started"

// After the process exits, output still queued in the PTY or pipe is read
// until the kernel reports the end (EIO on a PTY master once no slave is
// open, EOF on a pipe). A background job that inherited the terminal keeps
// it open, so the drain also ends after drainIdle without data, or once it
// has spent drainMax reading and recording. Time blocked delivering to a
// slow client does not count: a slow client never makes the broker give up
// on output the shell wrote before it exited. What a background job writes
// after the drain ends never reaches the master: closing the master hangs
// the terminal up, and the job's writes fail.
const (
	drainIdle = 250 * time.Millisecond
	drainMax  = 2 * time.Second
)

// exitSSHFailure is the status OpenSSH uses for failures of the SSH layer
// itself (ssh(1): "exits with 255 if an error occurred"); the client gets it
// when the launcher lost the process and no real status exists.
const exitSSHFailure = 255

// quietInputSize is the input copier's buffer while the client sends
// keystrokes and commands, which is what an idle or interactive session
// holds. A read that fills it means more is queued in the channel: the
// copier then reads into a pooled small batch (smallBatch) until a read leaves the
// batch partly empty, and gives the batch back before it waits again.
const quietInputSize = 2 << 10

// run is a started process with its record. Lifecycle: start publishes it,
// the copiers move bytes (recording before forwarding), finish waits for
// the exit, drains output, finalizes the record and closes the channel.
type run struct {
	ss   *session
	log  *slog.Logger // the session's logger with run and session ids
	rec  *recorder.Session
	proc launch.Process
	done chan struct{} // closed when finish is complete

	// master is the PTY master (PTY sessions); stdin is the pipe write end
	// (sessions without a PTY). Exactly one is set.
	master *ptyMaster
	stdin  *os.File
	// outputs are the ends the copiers read: the master, or stdout+stderr.
	outputs   []*output
	outputsWG sync.WaitGroup // the output copiers only; see startCopiers

	// exitedAt is written by finish before it sets exited, and read by the
	// copiers only after they saw exited set.
	exitedAt time.Time
	exited   atomic.Bool
	// noticeDelivered counts a PTY session's notice bytes on the stderr
	// channel (notify), which no output copier counts.
	noticeDelivered atomic.Int64

	mu sync.Mutex // protects masterClosed and serializes resize with close
	// masterClosed is set by finish once the master is closed.
	masterClosed bool

	// onEOF is what the client's EOF does (see copyInput): the server's
	// PTYEOF for a PTY shell, PTYEOFIgnore for every other session (their
	// EOF is handled as described on PTYEOF); set by start, immutable
	// afterwards.
	onEOF PTYEOF
}

// output is one stream the copiers move: its source, where it goes, and
// how the recorder accounts for it.
type output struct {
	src    outputSource
	dst    io.Writer
	stderr bool // a pipe session's stderr: its own stream in the integrity log
	// delivered counts the bytes the client's channel accepted.
	delivered atomic.Int64
	// undeliverable is set by a delivery whose channel write failed; the
	// next delivery starts only after it ended, and then skips the write.
	undeliverable bool
}

// outputSource is an output stream's read end: a pipe's (*os.File) or the
// PTY master (*ptyMaster). readBatch reads it through its RawConn.
type outputSource interface {
	syscall.Conn
	SetReadDeadline(time.Time) error
	Close() error
}

func (o *output) record(rec *recorder.Session, p []byte) error {
	if o.stderr {
		return rec.Stderr(p)
	}
	return rec.Output(p)
}

// start opens the PTY or pipes, creates the record, launches the process
// and publishes the run. On error it closes everything it opened; a record
// that was already created is finalized ("io-error" when its first events
// could not be written, "launch-failed" when the launcher failed), so no
// session directory is left without a trailer.
func (ss *session) start(command string, startEvent map[string]string) (err error) {
	if err := ss.ids.refusal(); err != nil {
		return &userError{msg: err.Error()}
	}
	// --pty-eof applies to PTY shells only (the tool servers'
	// client.shell then shell.end()). A PTY exec keeps OpenSSH's behaviour:
	// `ssh -tt host cmd </dev/null` sends EOF at once, and the command must
	// still run to its end, as under sshd.
	r := &run{ss: ss, done: make(chan struct{}), onEOF: PTYEOFIgnore}
	if ss.pty != nil && command == "" {
		r.onEOF = ss.srv.cfg.PTYEOF
	}
	spec := launch.Spec{User: ss.user, Command: command, Env: ss.env}
	slaves, err := r.openEnds(&spec)
	if err != nil {
		return &userError{msg: "could not allocate a terminal", cause: err}
	}
	defer func() {
		if err != nil {
			closeAll(slaves)
			r.closeEnds()
		}
	}()
	tty := ""
	if spec.TTY != nil {
		tty = spec.TTY.Name()
	}
	if r.rec, r.log, err = ss.createRecord(command, tty); err != nil {
		return err
	}
	ss.pending = append(ss.pending, pendingEvent{vocab.TypeRequest, startEvent})
	if err = ss.flushPendingEvents(r); err != nil {
		return ss.closeRefusedRecord(r.rec, reasonIOError, &userError{msg: "recording failed; session not started", cause: err})
	}
	// Ownership of the slave ends passes to Launch, which closes our copies
	// whether or not it succeeds.
	slaves = nil
	if r.proc, err = ss.srv.cfg.Launcher.Launch(ss.ctx, spec); err != nil {
		msg := "could not start the session process"
		if errors.Is(err, launch.ErrAgentUnreachable) {
			msg += ": the launch agent in the workload is unreachable"
		}
		return ss.closeRefusedRecord(r.rec, reasonLaunchFailed, &userError{msg: msg, cause: err})
	}
	r.annotateIdentity()
	r.bindAuditSession()
	ss.run.Store(r)
	// terminateOnDone may have seen no run yet: if the session already
	// ended, hang up what we just started.
	if ss.ctx.Err() != nil {
		r.proc.Hangup()
	}
	r.startCopiers()
	go r.finish()
	return nil
}

// closeRefusedRecord finalizes the record of a session refused after its
// record was created: the refusal line the client is about to get on stderr
// (session.endRefused) is recorded first, so every byte it receives is in
// the record, and the close record says refused (reason, notice, exit 1).
func (ss *session) closeRefusedRecord(rec *recorder.Session, reason string, ue *userError) error {
	if err := rec.Stderr(ss.noticeLine(ue.msg)); err != nil {
		ss.log.Warn("refusal not recorded", "err", err.Error())
	}
	rec.Close(exitRefused,
		recorder.Header{Name: vocab.HeaderCloseReason, Value: reason},
		recorder.Header{Name: vocab.HeaderNotice, Value: ue.msg})
	return ue
}

// createRecord resolves the session's ids and creates its record. A
// generated anon id that collides (a restart within the same second) is
// retried; a client-chosen id that exists is refused: ids are single-use.
func (ss *session) createRecord(command, tty string) (*recorder.Session, *slog.Logger, error) {
	ids := ss.ids
	if ids.run == "" {
		ids.run = defaultRunID
	}
	meta := recorder.Meta{RunID: ids.run, Command: command}
	if ss.pty != nil {
		meta.Term, meta.TTY = ss.pty.term, tty
		meta.Cols, meta.Rows = int(ss.pty.win.cols), int(ss.pty.win.rows)
	}
	const maxAnonAttempts = 8
	for attempt := 0; ; attempt++ {
		generated := ids.session == ""
		meta.SessionID = ids.session
		if generated {
			meta.SessionID = ss.srv.nextAnonID()
		}
		meta.Headers = ss.openHeaders(ids, meta.SessionID)
		log := ss.log.With("run", ids.run, "session", meta.SessionID)
		opts := ss.srv.recorderOptions()
		// Said when it happens, once: an operator watching the logs learns
		// that this session's later bytes are counted, not stored. The
		// ids and the cap only, never bytes.
		opts.OnSizeLimit = func(limit int64) {
			log.Warn("transcript size cap reached; later data is counted and digested, not stored", "cap_bytes", limit)
		}
		rec, err := recorder.Create(ss.srv.cfg.CaptureRoot, meta, opts)
		var critical *recorder.DiskCriticalError
		switch {
		case err == nil:
			log.Info("session recording", "mode", sessionMode(ss.pty != nil, command), "dir", rec.Dir())
			if why := rec.KeyFallback(); why != nil {
				log.Warn("session signed by the host key: the session key pool gave none", "err", why.Error())
			}
			return rec, log, nil
		case errors.Is(err, recorder.ErrSessionExists) && !generated:
			return nil, nil, &userError{msg: fmt.Sprintf("session id %s was already recorded; session ids are single-use", meta.SessionID), cause: err}
		case errors.Is(err, recorder.ErrSessionExists) && attempt < maxAnonAttempts:
			continue
		case errors.Is(err, safefs.ErrUnsafeDir):
			// Refused rather than followed: a planted symlink would put the
			// record outside the capture root.
			return nil, nil, &userError{msg: fmt.Sprintf("the capture folder of run %s is a symlink or not a directory; session not started", ids.run), cause: err}
		case errors.Is(err, recorder.ErrNoSessionKey):
			return nil, nil, &userError{msg: RefusalNoSessionKey, cause: err}
		case errors.As(err, &critical):
			return nil, nil, &userError{msg: diskCriticalRefusal(critical), cause: err}
		case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
			return nil, nil, &userError{msg: RefusalDiskFull, cause: err}
		default:
			return nil, nil, &userError{msg: "recording is unavailable; session not started", cause: err}
		}
	}
}

// openHeaders are the provenance lines at the top of the timing file.
func (ss *session) openHeaders(ids sessionIDs, sessionID string) []recorder.Header {
	h := []recorder.Header{
		{Name: vocab.HeaderRunID, Value: ids.run},
		{Name: vocab.HeaderSessionID, Value: sessionID},
	}
	if ids.sessionInvalid {
		h = append(h, recorder.Header{Name: vocab.HeaderSessionIDSupplied, Value: vocab.SuppliedInvalid})
	}
	if ids.trace != "" {
		h = append(h, recorder.Header{Name: vocab.HeaderTraceID, Value: ids.trace})
	}
	return append(h,
		recorder.Header{Name: vocab.HeaderLoginUser, Value: ss.user},
		recorder.Header{Name: vocab.HeaderClientKey, Value: ss.keyFP},
		recorder.Header{Name: vocab.HeaderClientAddr, Value: ss.remote},
		recorder.Header{Name: vocab.HeaderConn, Value: ss.conn.id},
		recorder.Header{Name: vocab.HeaderHostKey, Value: gossh.FingerprintSHA256(ss.srv.cfg.HostKey.PublicKey())},
		recorder.Header{Name: vocab.HeaderAdapter, Value: ss.srv.cfg.Launcher.Name()},
	)
}

// annotateIdentity records whom the launcher ran the process as. It is only
// known after the launch (the agent resolves users in the workload).
func (r *run) annotateIdentity() {
	id := r.proc.Identity()
	err := r.rec.Annotate(
		recorder.Header{Name: vocab.HeaderRunAs, Value: id.User},
		recorder.Header{Name: vocab.HeaderRunAsUID, Value: strconv.Itoa(id.UID)},
		recorder.Header{Name: vocab.HeaderRunAsShell, Value: id.Shell},
		recorder.Header{Name: vocab.HeaderRunAsNote, Value: id.Note},
		recorder.Header{Name: vocab.HeaderRunAsSource, Value: id.Source},
	)
	if err != nil {
		r.ss.stop(ioCause(err))
	}
}

// bindAuditSession records the session's kernel audit session id (or why
// it has none) and binds it to the witnesses that select evidence by it,
// before any byte is copied, so what they see of the session is attributed
// from its start.
func (r *run) bindAuditSession() {
	var err error
	if ses, ok := r.proc.AuditSession(); ok {
		err = r.rec.BindAuditSession(ses)
	} else {
		reason := "the launcher gave no reason"
		if n, ok := r.proc.(launch.AuditNoter); ok && n.AuditSessionNote() != "" {
			reason = n.AuditSessionNote()
		}
		r.log.Info("session has no audit session of its own", "reason", reason)
		err = r.rec.NoAuditSession(reason)
	}
	if err != nil {
		r.ss.stop(ioCause(err))
	}
}

func sessionMode(pty bool, command string) string {
	switch {
	case pty && command == "":
		return "pty-shell"
	case pty:
		return "pty-exec"
	default:
		return "exec"
	}
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// startCopiers starts one goroutine per output stream (counted by
// outputsWG, which finish waits for) and one for input. The input copier is
// not counted: it blocks in the channel's Read until the client sends or the
// channel closes, which is after finish, so waiting for it would deadlock.
func (r *run) startCopiers() {
	for _, o := range r.outputs {
		r.outputsWG.Add(1)
		go r.copyOutput(o)
	}
	if r.master != nil {
		go r.copyInput(r.master, false)
	} else {
		go r.copyInput(r.stdin, true)
	}
}

// copyOutput records each batch before forwarding it. A slow client blocks
// the delivery, which stops the reads, which fills the kernel buffer, which
// blocks the writer in the workload: backpressure, never loss. Once the
// client is gone the bytes are still recorded, just not delivered.
//
// Delivering batch k (encrypting it and writing it to the connection)
// overlaps with reading and recording batch k+1, so the two cores work on
// both at once; delivery k+1 starts only after delivery k ended, so the
// client gets the batches in the order they were recorded, and every byte
// it gets was recorded (written to the typescript with write(2)) first. At
// most two batches per stream are held: the one delivered and the one
// recorded.
func (r *run) copyOutput(o *output) {
	defer r.outputsWG.Done()
	defer recoverSession(r.log)
	var delivering chan struct{} // closed when the last delivery ended
	defer func() {
		if delivering != nil {
			<-delivering
		}
	}()
	var drained time.Duration // after the exit: time spent reading and recording
	bulk := false             // the last read filled its batch
	for {
		start := time.Now()
		batch, n, waited, err := readBatch(o.src, bulk)
		bulk = n > 0 && n == len(*batch)
		if n > 0 {
			if rerr := o.record(r.rec, (*batch)[:n]); rerr != nil {
				putBatch(batch)
				r.ss.stop(ioCause(rerr))
				return
			}
		}
		if r.exited.Load() {
			drained += time.Since(maxTime(start, r.exitedAt))
		}
		if n > 0 {
			if delivering != nil {
				<-delivering
				delivering = nil
			}
			if waited && n <= inlineDeliveryMax {
				r.deliver(o, batch, n, nil)
			} else {
				delivering = make(chan struct{})
				go r.deliver(o, batch, n, delivering)
			}
		}
		if err != nil {
			// EIO (master without slaves), EOF (pipe), deadline (drain
			// over) or the file closed: the stream is finished either way.
			return
		}
		if r.exited.Load() {
			left := drainMax - drained
			if left <= 0 {
				return
			}
			// Both kinds of source are pollable by construction
			// (newEpollSet, os.Pipe), so this cannot fail.
			o.src.SetReadDeadline(time.Now().Add(min(drainIdle, left)))
		}
	}
}

// inlineDeliveryMax is the largest batch copyOutput delivers itself rather
// than on a goroutine of its own, when the stream was idle before it (the
// read waited for it). An interactive answer (a prompt, a command's few
// lines) is such a batch, with nothing to overlap: handing it to another
// goroutine only adds a wake-up to the round trip. A burst of bulk output
// finds the next bytes already queued, and is delivered while the next
// batch is read and recorded (two batches in flight). A stream whose
// writer is slower than the reader has its reads wait, so it is delivered
// inline, which costs nothing while the reader keeps up; once it falls
// behind, the bytes are queued and delivery overlaps again. Inline, the
// reading waits while the channel write waits for the client's window,
// the back pressure sshd applies too.
const inlineDeliveryMax = 16 << 10

// deliver writes a recorded batch of o to the client's channel, returns
// the batch to the pool and closes done (when not nil).
func (r *run) deliver(o *output, batch *[]byte, n int, done chan<- struct{}) {
	if done != nil {
		defer close(done)
	}
	defer putBatch(batch)
	defer recoverSession(r.log)
	if o.undeliverable {
		return
	}
	// A write that fails part-way still delivered its first w bytes.
	w, werr := o.dst.Write((*batch)[:n])
	o.delivered.Add(int64(w))
	o.undeliverable = werr != nil
}

// copyInput records the client's bytes before writing them to the master or
// the stdin pipe. Bytes are recorded even if the write then fails: they
// were sent, and the record says what the session was offered.
func (r *run) copyInput(dst io.WriteCloser, closeOnEOF bool) {
	defer recoverSession(r.log)
	quiet := make([]byte, quietInputSize)
	var batch *[]byte // a pooled batch while the client sends in bulk
	defer func() {
		if batch != nil {
			putBatch(batch)
		}
	}()
	for {
		buf := quiet
		if batch != nil {
			buf = *batch
		}
		n, err := r.ss.ch.Read(buf)
		if n > 0 {
			if rerr := r.rec.Input(buf[:n]); rerr != nil {
				if !errors.Is(rerr, recorder.ErrClosed) {
					r.ss.stop(ioCause(rerr))
				}
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// Client EOF: a pipe session's stdin ends. A PTY has no half
			// close; a shell sees input only when the client sends it, so
			// with PTYEOFChar or PTYEOFHangup the EOF ends a PTY shell
			// instead (the shell's own exit, which also closes the channel
			// and so ends this read, is not mistaken for one). Every byte
			// the client sent before it was written above.
			switch {
			case closeOnEOF:
				dst.Close()
			case r.exited.Load():
			case r.onEOF == PTYEOFHangup:
				r.ss.stop(errClientEOF)
			case r.onEOF == PTYEOFChar:
				r.typeEOF()
			}
			return
		}
		switch {
		case n == len(buf) && batch == nil:
			batch = getBatch(false)
		case n < len(buf) && batch != nil:
			putBatch(batch)
			batch = nil
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// resize applies a window change to the PTY and records it.
func (r *run) resize(w window) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.masterClosed {
		return false, errNotStarted
	}
	if err := setWindow(r.master, w); err != nil {
		return false, err
	}
	if err := r.rec.Resize(int(w.rows), int(w.cols)); err != nil {
		r.ss.stop(ioCause(err))
		return false, err
	}
	return true, nil
}

func (r *run) signal(name string, sig syscall.Signal) (bool, error) {
	if err := r.proc.Signal(sig); err != nil {
		return false, fmt.Errorf("signal %s: %w", name, err)
	}
	return true, nil
}

// finish runs once per run. The close order is RFC 4254 §6.10 as clients
// expect it: remaining output, exit-status (or exit-signal), EOF, close.
func (r *run) finish() {
	defer close(r.done)
	defer recoverSession(r.log)
	exit, werr := r.proc.Wait()
	r.exitedAt = time.Now()
	r.exited.Store(true)
	for _, o := range r.outputs {
		o.src.SetReadDeadline(time.Now().Add(drainIdle))
	}
	r.outputsWG.Wait()

	cause := r.closeCause(werr)
	if cause.msg != "" && cause.reason != reasonClientClosed {
		r.notify(cause.msg)
	}
	code := scriptExitCode(exit, werr)
	in, out := r.rec.Bytes()
	if err := r.rec.Close(code, r.closeHeaders(cause, exit)...); err != nil {
		r.log.Error("record finalize failed", "err", err)
	}
	r.closeEnds()

	if cause.reason != reasonClientClosed {
		r.sendExit(exit, werr)
		r.ss.ch.CloseWrite()
	}
	r.ss.ch.Close()
	r.log.Info("session closed", "reason", cause.reason, "exit_code", code,
		"bytes_in", in, "bytes_out", out, "bytes_delivered", r.deliveredTotal())
	if cause.err != nil {
		r.log.Warn("session ended abnormally", "cause", cause.err.Error())
	}
}

// notify tells the client on stderr why the sidecar ended its session. The
// line is recorded first, as stderr, so that every byte the client
// received from this session is in its record. When recording itself has
// failed the client is told all the same: the record is already broken,
// and the close record (if it can be written) carries the notice.
func (r *run) notify(msg string) {
	line := r.ss.noticeLine(msg)
	if err := r.rec.Stderr(line); err != nil {
		r.log.Warn("notice not recorded", "err", err.Error())
	}
	n, _ := r.ss.ch.Stderr().Write(line)
	if len(r.outputs) > 1 {
		r.outputs[1].delivered.Add(int64(n))
	} else {
		r.noticeDelivered.Add(int64(n))
	}
}

// deliveredTotal counts the same streams as the recorder's output count
// (output, stderr and the sidecar's notices), so the log's bytes_out and
// bytes_delivered are equal unless the client went away.
func (r *run) deliveredTotal() int64 {
	total := r.noticeDelivered.Load()
	for _, o := range r.outputs {
		total += o.delivered.Load()
	}
	return total
}

// closeCause decides the record's close reason: whatever stopped the session
// first (client, shutdown, I/O error), else a lost launcher, else the shell
// simply exited.
func (r *run) closeCause(werr error) *closeCause {
	var c *closeCause
	if errors.As(context.Cause(r.ss.ctx), &c) {
		// The channel's Read reports EOF alike for an EOF, a close and a
		// dead connection. Only a client still there, its request stream
		// open, sent an EOF; the stream ends within microseconds of a
		// close, long before the hung-up shell has exited and drained.
		if c == errClientEOF && r.ss.requestsEnded.Load() {
			return errClientClosed
		}
		return c
	}
	if r.ss.ctx.Err() != nil {
		// The connection's context ended without a cause of ours: the
		// connection died.
		return errClientClosed
	}
	if werr != nil {
		return &closeCause{reason: reasonLauncherLost, msg: "lost the session process; session recorded and closed", err: werr}
	}
	return &closeCause{reason: reasonShellExited}
}

func (r *run) closeHeaders(cause *closeCause, exit launch.Exit) []recorder.Header {
	h := []recorder.Header{{Name: vocab.HeaderCloseReason, Value: cause.reason}}
	if cause.msg != "" {
		h = append(h, recorder.Header{Name: vocab.HeaderNotice, Value: cause.msg})
	}
	if name := exit.SignalName(); name != "" {
		h = append(h, recorder.Header{Name: vocab.HeaderExitSignal, Value: name})
	}
	h = append(h, recorder.Header{Name: vocab.HeaderBytesDelivered, Value: strconv.FormatInt(r.outputs[0].delivered.Load(), 10)})
	if len(r.outputs) > 1 {
		h = append(h, recorder.Header{Name: vocab.HeaderBytesDeliveredErr, Value: strconv.FormatInt(r.outputs[1].delivered.Load(), 10)})
	}
	return h
}

// closeEnds closes the master (hanging up anything still on the slave) or
// the remaining pipe ends.
func (r *run) closeEnds() {
	r.mu.Lock()
	r.masterClosed = true
	r.mu.Unlock()
	if r.master != nil {
		r.master.Close()
	}
	if r.stdin != nil {
		r.stdin.Close()
	}
	for _, o := range r.outputs {
		if o.src != outputSource(r.master) {
			o.src.Close()
		}
	}
}

func (r *run) sendExit(exit launch.Exit, werr error) {
	if werr == nil && exit.Signal != 0 {
		if name := exit.SignalName(); name != "" {
			r.ss.ch.SendRequest("exit-signal", false, gossh.Marshal(exitSignalMsg{Signal: name, CoreDumped: exit.CoreDumped}))
			return
		}
	}
	r.ss.ch.SendRequest("exit-status", false, gossh.Marshal(exitStatusMsg{Status: uint32(scriptExitCode(exit, werr))}))
}

// scriptExitCode is the status script(1) writes in its trailer: the exit
// code, or 128+signal as a shell reports a killed child.
func scriptExitCode(exit launch.Exit, werr error) int {
	switch {
	case werr != nil:
		return exitSSHFailure
	case exit.Signal != 0:
		return 128 + int(exit.Signal)
	default:
		return exit.Code
	}
}

// ioCause ends a session whose recording failed. A full capture volume
// has a reason of its own: the client and the record both say it was
// the disk, not a fault of the sidecar.
func ioCause(err error) *closeCause {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return &closeCause{reason: vocab.CloseDiskFull, msg: "recording failed: the capture volume (disk) has no space left; session closed", err: err}
	}
	return &closeCause{reason: reasonIOError, msg: "recording failed; session closed", err: err}
}
