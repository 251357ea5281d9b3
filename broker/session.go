package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/ratelog"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/launch"
)

// Upstream gliderlabs/ssh's session handler rewrites "\n" to "\r\n" in
// Session.Write on PTY sessions and drops the pty-req terminal modes, so the
// client would receive different bytes than the recorder saw at the master.
// The broker therefore serves the "session" channel type itself on the raw
// x/crypto/ssh channel (docs/OPERATING.md, "Behaviour a client can rely on": bytes are
// not rewritten in either direction); gliderlabs still runs the server, host
// keys, authentication and connection lifecycle.

// session is one "session" channel. Lifecycle: handleSession admits and
// accepts it, serveRequests collects pty-req and env until shell or exec
// starts a run (run.go), and the run's finish finalizes the record and
// closes the channel.
type session struct {
	srv  *Server
	conn *connState
	ch   gossh.Channel
	log  *slog.Logger // per connection; a run logs with its ids (run.log)

	user, keyFP, remote string

	ctx    context.Context
	cancel context.CancelCauseFunc // cause: a *closeCause, read by finish

	// Owned by the request loop; read-only once run is published.
	ids           sessionIDs
	pty           *ptyRequest
	env           []string
	envRequests   int
	pending       []pendingEvent // control events before the record exists
	droppedEvents int
	// refusal is the line shown to the client when its shell or exec was
	// refused (endRefused); ours, never an echo of client input.
	refusal string

	// run is published by start; nil until the shell or exec started.
	run atomic.Pointer[run]
	// requestsEnded is set once the channel's request stream has ended: the
	// client closed the channel or the connection died (see closeCause).
	requestsEnded atomic.Bool
}

func (srv *Server) handleSession(_ *gliderssh.Server, conn *gossh.ServerConn, newChan gossh.NewChannel, ctx gliderssh.Context) {
	cs := connStateOf(ctx)
	ss := &session{
		srv:    srv,
		conn:   cs,
		log:    cs.log,
		user:   conn.User(),
		remote: conn.RemoteAddr().String(),
	}
	if conn.Permissions != nil {
		ss.keyFP = conn.Permissions.Extensions[permKeyFingerprint]
	}
	// The context exists before admit publishes ss, so Shutdown can stop it.
	ss.ctx, ss.cancel = context.WithCancelCause(ctx)
	defer ss.cancel(errClientClosed)
	if err := srv.admit(ss); err != nil {
		cs.log.Warn("session refused", "reason", err.Error())
		newChan.Reject(gossh.ResourceShortage, "aptl-kali-capture: "+err.Error())
		return
	}
	defer srv.release(ss)

	ch, reqs, err := newChan.Accept()
	if err != nil {
		cs.log.Warn("session accept failed", "err", err)
		return
	}
	ss.ch = ch
	go ss.terminateOnDone()
	srv.startClientAlive(cs, conn)

	ss.serveRequests(reqs)
	ss.requestsEnded.Store(true)
	// The request stream ends when the client closes the channel or the
	// connection dies, or after finish closed it. In the first two cases the
	// shell is hung up and the record says the client closed.
	ss.cancel(errClientClosed)
	if r := ss.run.Load(); r != nil {
		<-r.done
	}
}

// stop ends the session with cause; the first cause wins.
func (ss *session) stop(cause *closeCause) { ss.cancel(cause) }

// terminateOnDone is the one owner of termination: when the session's
// context ends, it hangs up the running process (whose exit then finalizes
// the record) or, before any process started, closes the channel.
func (ss *session) terminateOnDone() {
	defer recoverSession(ss.log)
	<-ss.ctx.Done()
	if r := ss.run.Load(); r != nil {
		r.proc.Hangup()
		return
	}
	ss.ch.Close()
}

// A client can send refused requests as fast as the channel carries them;
// each session logs refusals one by one up to a burst per second and the
// rest as a count, with the last count at the session's end.
const (
	requestRefusalLogBurst  = 10
	requestRefusalLogWindow = time.Second
)

func (ss *session) serveRequests(reqs <-chan *gossh.Request) {
	refusals := ratelog.New(ss.log, slog.LevelInfo, "channel requests refused, not logged one by one",
		requestRefusalLogBurst, requestRefusalLogWindow)
	defer refusals.Flush()
	for req := range reqs {
		ok, err := ss.handleRequest(req)
		if err != nil {
			refusals.Note("request refused", "type", logSafe(req.Type), "reason", err.Error())
		}
		req.Reply(ok, nil)
		// An accepted window change is in the record as a resize, an
		// accepted shell or exec was recorded by start, an accepted signal
		// by handleSignal before it was delivered.
		if !ok || (req.Type != "window-change" && req.Type != "shell" && req.Type != "exec" && req.Type != "signal") {
			ss.event(vocab.TypeRequest, requestAttrs(req.Type, req.Payload, ok, err))
		}
		// A refused shell or exec was accepted (see handleStart): the reason
		// follows the reply, then the session ends as a failed command does.
		if errors.Is(err, errStartRefused) {
			ss.endRefused(err)
		}
	}
}

var (
	errAlreadyStarted = errors.New("session already started")
	errNotStarted     = errors.New("session not started")
	errNoPTY          = errors.New("session has no pty")
	errRefusedType    = errors.New("request type not supported")
	errStartRefused   = errors.New("session refused")
	errSessionEnded   = errors.New("session has ended")
)

func (ss *session) handleRequest(req *gossh.Request) (bool, error) {
	// A session that was refused or stopped takes no further requests, even
	// ones the client pipelined behind the refused shell or exec.
	if ss.ctx.Err() != nil {
		return false, errSessionEnded
	}
	running := ss.run.Load()
	switch req.Type {
	case "pty-req":
		if running != nil || ss.pty != nil {
			return false, errAlreadyStarted
		}
		p, err := parsePtyReq(req.Payload)
		if err != nil {
			return false, err
		}
		ss.pty = &p
		return true, nil
	case "env":
		return ss.handleEnv(req.Payload, running != nil)
	case "shell", "exec":
		return ss.handleStart(req)
	case "window-change":
		return ss.handleWindowChange(req.Payload, running)
	case "signal":
		return ss.handleSignal(req.Payload, running)
	case "subsystem":
		name, _ := parseNamed(req.Type, req.Payload)
		return false, fmt.Errorf("subsystem %s: %w", logSafe(name), errRefusedType)
	default:
		// x11-req, auth-agent-req@openssh.com, and anything unknown.
		return false, errRefusedType
	}
}

func (ss *session) handleEnv(payload []byte, running bool) (bool, error) {
	if running {
		return false, errAlreadyStarted
	}
	ss.envRequests++
	name, value, err := parseEnv(payload)
	if ss.envRequests > ss.srv.cfg.Limits.MaxEnvRequests {
		return false, refuseEnvOverLimit(name, ss.srv.cfg.Limits.MaxEnvRequests, &ss.ids)
	}
	if err != nil {
		return false, err
	}
	d := decideEnv(name, value, ss.srv.cfg.AcceptEnv, &ss.ids)
	if d.err != nil {
		return false, fmt.Errorf("env %s: %w", logSafe(d.name), d.err)
	}
	ss.env = append(ss.env, name+"="+value)
	return true, nil
}

// handleStart starts the shell or exec. A session that may not run (a used
// id, a reserved or invalid run id, a launch failure) is refused as sshd
// refuses a nologin account: the request is accepted, so that stock OpenSSH
// keeps reading the channel, and endRefused then writes the reason on
// stderr, exit-status 1, EOF and close. Replying failure instead made
// OpenSSH exit before it read the stderr line most of the time.
func (ss *session) handleStart(req *gossh.Request) (bool, error) {
	if ss.run.Load() != nil {
		return false, errAlreadyStarted
	}
	var command string
	if req.Type == "exec" {
		c, err := parseExec(req.Payload)
		if err != nil {
			ss.refusal = err.Error()
			return true, fmt.Errorf("%w: %w", errStartRefused, err)
		}
		command = c
	}
	// The accepted shell or exec goes into the record before the process
	// starts: once it runs, it may finish (and the record close) before the
	// request loop could write the event after its reply.
	if err := ss.start(command, requestAttrs(req.Type, req.Payload, true, nil)); err != nil {
		ss.refusal = "could not start the session"
		var ue *userError
		if errors.As(err, &ue) {
			ss.refusal = ue.msg
		}
		return true, fmt.Errorf("%w: %w", errStartRefused, err)
	}
	return true, nil
}

// exitRefused is the status a refused session ends with, as sshd's
// nologin(8) does.
const exitRefused = 1

// endRefused ends a session whose start was refused, after the accepted
// reply: the reason on stderr, exit-status 1, EOF, then close. Where no
// record exists for the session (a used id, a refused run id, a recording
// that could not be created) this log line is the refusal's record: a used
// id's folder is never reopened, and a refused run id has none.
func (ss *session) endRefused(err error) {
	ss.log.Warn("session refused", "user", logSafe(ss.user), "key", ss.keyFP, "remote", ss.remote,
		"run", logSafe(ss.ids.run), "session", logSafe(ss.ids.session), "reason", err.Error())
	ss.refuse(ss.refusal)
	ss.ch.SendRequest("exit-status", false, gossh.Marshal(exitStatusMsg{Status: exitRefused}))
	ss.ch.CloseWrite()
	ss.stop(errRefused)
}

func (ss *session) handleWindowChange(payload []byte, r *run) (bool, error) {
	w, err := parseWindowChange(payload)
	if err != nil {
		return false, err
	}
	switch {
	case ss.pty == nil:
		return false, errNoPTY
	case r == nil:
		ss.pty.win = w
		return true, nil
	}
	return r.resize(w)
}

func (ss *session) handleSignal(payload []byte, r *run) (bool, error) {
	name, err := parseNamed("signal", payload)
	if err != nil {
		return false, err
	}
	if r == nil {
		return false, errNotStarted
	}
	sig, ok := launch.SignalByName(name)
	if !ok {
		return false, fmt.Errorf("signal %s: not an RFC 4254 signal name", logSafe(name))
	}
	// Record before delivering, as bytes are recorded before they are
	// forwarded: a signal that ends the process ends the record too, and
	// written afterwards it would find the record closed and be lost
	// (serveRequests records the refusal if delivery fails).
	ss.event(vocab.TypeRequest, requestAttrs("signal", payload, true, nil))
	return r.signal(name, sig)
}

// refuse tells the client why its session cannot run, on stderr. The text
// is ours (never an echo of client input beyond validated ids).
func (ss *session) refuse(msg string) {
	ss.ch.Stderr().Write(ss.noticeLine(msg))
}

// noticeLine is a message of the sidecar's own as the client's terminal
// shows it.
func (ss *session) noticeLine(msg string) []byte {
	if ss.pty != nil {
		return []byte("aptl-kali-capture: " + msg + "\r\n")
	}
	return []byte("aptl-kali-capture: " + msg + "\n")
}

// closeCause is why a session ended, carried as a context cause. reason is
// a close reason of internal/vocab (docs/RECORD.md lists them); msg, when set, is shown to the client.
type closeCause struct {
	reason string
	msg    string
	err    error // internal detail for the log; never sent to the client
}

func (c *closeCause) Error() string {
	if c.err != nil {
		return c.reason + ": " + c.err.Error()
	}
	return c.reason
}

// Close reasons written into the record (internal/vocab names them all).
const (
	reasonShellExited  = vocab.CloseShellExited
	reasonClientClosed = vocab.CloseClientClosed
	reasonClientEOF    = vocab.CloseClientEOF  // EOF on a PTY session with PTYEOFHangup
	reasonEOFTimeout   = vocab.CloseEOFTimeout // PTYEOFChar's fallback to the hang-up
	reasonLauncherLost = vocab.CloseLauncherLost
	reasonShutdown     = vocab.CloseSidecarShutdown
	reasonIOError      = vocab.CloseIOError
	reasonLaunchFailed = vocab.CloseLaunchFailed
	// reasonRefused ends a session whose shell or exec was refused before
	// any record was created, so it never reaches a record.
	reasonRefused = "refused"
)

var (
	errClientClosed = &closeCause{reason: reasonClientClosed}
	errClientEOF    = &closeCause{reason: reasonClientEOF}
	errEOFTimeout   = &closeCause{reason: reasonEOFTimeout}
	errShutdown     = &closeCause{reason: reasonShutdown, msg: "server shutting down; session recorded and closed"}
	errRefused      = &closeCause{reason: reasonRefused}
)

// PTYEOF is what the client's EOF (SSH_MSG_CHANNEL_EOF) does to a PTY
// shell. A PTY has no half close, so the shell never sees the EOF itself;
// without a PTY the EOF always closes the process's stdin, and a PTY exec
// ignores it in every mode, as sshd does (OpenSSH's `ssh -tt host cmd`
// sends it at once when its stdin is not a terminal, and the command must
// still run to its end).
type PTYEOF int

const (
	// PTYEOFChar, the default, types the terminal's EOF character (VEOF,
	// normally ^D) once the terminal has read everything the client sent
	// and waits for input, as a person presses Ctrl-D: a shell at its
	// prompt exits after running what was typed ahead, and node ssh2's
	// shell.end() gets its close at once. A session that has not ended
	// within Config.PTYEOFWait of the EOF is hung up as PTYEOFHangup does
	// (close reason client-eof-timeout). ptyeof_linux.go says when the
	// character is written and why.
	PTYEOFChar PTYEOF = iota
	// PTYEOFIgnore is OpenSSH's behaviour: sshd keeps a second descriptor
	// of the master, so the EOF changes nothing and the session lasts until
	// the client closes the channel or the shell exits.
	PTYEOFIgnore
	// PTYEOFHangup hangs a PTY shell up exactly as a client close does,
	// with close reason client-eof. The channel stays open until the
	// record is finalized, so a client that sends EOF and waits for the
	// channel's close (node ssh2's shell.end()) knows the record is
	// complete; what it typed ahead and the shell had not yet run is lost.
	PTYEOFHangup
)

// ptyEOFNames are the settings' spellings, by mode.
var ptyEOFNames = map[PTYEOF]string{PTYEOFChar: "eof", PTYEOFIgnore: "ignore", PTYEOFHangup: "hangup"}

// ParsePTYEOF reads the setting's spelling: "eof", "ignore" or "hangup".
func ParsePTYEOF(s string) (PTYEOF, error) {
	for m, name := range ptyEOFNames {
		if s == name {
			return m, nil
		}
	}
	return PTYEOFChar, fmt.Errorf("%q is not eof, ignore or hangup", s)
}

func (m PTYEOF) String() string { return ptyEOFNames[m] }

// DefaultPTYEOFWait is how long PTYEOFChar gives a session to end after
// the client's EOF before it hangs it up: below node ssh2's 3 s wait for
// the close (PersistentSession), with room for the hang-up and the drain,
// so the fallback too is finalized before that client gives up on it.
const DefaultPTYEOFWait = 2 * time.Second

// userError is a start failure whose msg may be shown to the client.
type userError struct {
	msg   string
	cause error
}

func (e *userError) Error() string {
	if e.cause != nil {
		return e.msg + ": " + e.cause.Error()
	}
	return e.msg
}

func (e *userError) Unwrap() error { return e.cause }

// recoverSession keeps a panic in one session's goroutine from taking the
// whole server (and every other session's recording) down.
func recoverSession(log *slog.Logger) {
	if p := recover(); p != nil {
		log.Error("session goroutine panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	}
}
