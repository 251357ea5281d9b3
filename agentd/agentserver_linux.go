// Package agentd is the workload's side of the "agent" adapter: the server
// of aptl-launch-agent, which runs in the workload container (as root there),
// accepts the sidecar's connections, starts each session's login shell on the
// slave it receives (launch/login), and reports the exit over the protocol
// of internal/agentwire. The sidecar's side is launch/agentclient.
package agentd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"github.com/aptl/aptl-kali-capture/internal/ratelog"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

const (
	// DefaultMaxSessions bounds concurrent connections to the agent, as
	// the broker's default MaxSessions (64) bounds sessions.
	DefaultMaxSessions = 64
	// agentRequestTimeout bounds the wait for the first request on a connection.
	agentRequestTimeout = 10 * time.Second
	// agentReplyTimeout bounds each reply written to the sidecar.
	agentReplyTimeout = 5 * time.Second
)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("agentd: agent server closed")

// Config is what the agent's server may do. The sidecar cannot change
// any of it: the wire carries no settings.
type Config struct {
	Users     []string // login names the agent may start sessions as
	AllowRoot bool     // "root", or any uid-0 login.Account, may be started
	// InsecureAllowSamePIDNamespace accepts peers inside the agent's own PID
	// namespace, i.e. any workload process. Development and tests only.
	InsecureAllowSamePIDNamespace bool
	// PeerUID and PeerGID are the sidecar's credentials as SO_PEERCRED
	// reports them in the agent's user namespace (0 and 0, root, unless
	// the sidecar runs as another user). Any other peer is refused, in the
	// development mode too.
	PeerUID, PeerGID int
	MaxSessions      int // concurrent connections; 0 means DefaultMaxSessions
	Logger           *slog.Logger
}

// Server serves the agent's side of the wire protocol.
//
// Lock order: mu before startMu. Fields not under a lock are set by
// NewServer and immutable.
type Server struct {
	cfg                   Config
	users                 map[string]bool
	passwdPath, groupPath string // the workload's own files; tests use fixtures
	log                   *slog.Logger
	slots                 chan struct{} // one per open connection
	refusals              *ratelog.Log  // refused peers, rate-limited (newRefusalLog)
	requestTimeout        time.Duration // agentRequestTimeout; tests shorten it
	nextConn              atomic.Uint64
	// instance tells this run of the agent from the next, in every probe-ok
	// and started reply (internal/agentwire): the sidecar logs each new one.
	instance agentwire.Instance

	mu       sync.Mutex // guards the fields below
	closing  bool
	ln       *net.UnixListener
	sessions map[*agentSession]struct{}
	wg       sync.WaitGroup // every connection goroutine

	// startMu is held across cmd.Start and the registration of the child's
	// pid in leaders, so the orphan reaper (agentreap_linux.go) never reaps a
	// session leader whose Wait is pending.
	startMu sync.Mutex
	leaders map[int]*agentSession
}

// agentSession is one connection's session, for Shutdown.
type agentSession struct {
	proc     *login.Process
	shutdown atomic.Bool // set by Shutdown: report an error instead of the exit
}

// NewServer checks cfg and returns a server. Like launch/local, the first
// call makes signals this process ignores caught instead, so sessions start
// with default dispositions (launch/login/sigdisp_linux.go).
func NewServer(cfg Config) (*Server, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	inst, err := newInstance()
	if err != nil {
		return nil, err
	}
	login.CatchIgnoredSignals()
	s := &Server{instance: inst, cfg: cfg, users: map[string]bool{}, passwdPath: login.SystemPasswd, groupPath: login.SystemGroup,
		log: cfg.Logger, slots: make(chan struct{}, cfg.MaxSessions), refusals: newRefusalLog(cfg.Logger),
		requestTimeout: agentRequestTimeout, sessions: map[*agentSession]struct{}{}, leaders: map[int]*agentSession{}}
	for _, u := range cfg.Users {
		s.users[u] = true
	}
	return s, nil
}

// newInstance makes this run's instance: a random id, the pid, the time.
func newInstance() (agentwire.Instance, error) {
	var id [agentwire.InstanceIDLen / 2]byte
	if _, err := rand.Read(id[:]); err != nil {
		return agentwire.Instance{}, fmt.Errorf("launch agent: instance id: %w", err)
	}
	return agentwire.Instance{ID: hex.EncodeToString(id[:]), PID: uint32(os.Getpid()), Started: time.Now().UTC()}, nil
}

// Instance is this run's instance, as every probe-ok and started reply carries it.
func (s *Server) Instance() agentwire.Instance { return s.instance }

// Serve accepts connections on ln until Shutdown, then returns ErrServerClosed.
func (s *Server) Serve(ln *net.UnixListener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.ln = ln
	s.mu.Unlock()
	stopReaper := s.startReaper()
	defer stopReaper()
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if s.isClosing() {
				return ErrServerClosed
			}
			// EMFILE and the like: wait instead of spinning, up to a second.
			s.log.Warn("accept failed", "err", err.Error())
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		id := s.nextConn.Add(1)
		cred, ok := s.admit(c, id)
		if !ok {
			continue
		}
		if !s.track() {
			c.Close()
			return ErrServerClosed
		}
		go s.serveConn(c, id, cred)
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// track counts a connection goroutine unless the server is closing.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.wg.Add(1)
	return true
}

// Shutdown stops accepting, hangs up every session (each reports an error to
// its sidecar, which records "launcher-lost"), and waits for the connections
// to end or ctx to expire.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	if s.ln != nil {
		s.ln.Close()
	}
	for ss := range s.sessions {
		ss.shutdown.Store(true)
		ss.proc.Hangup()
	}
	s.mu.Unlock()
	s.refusals.Flush()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serveConn serves one connection of an admitted peer: a probe, or one
// session from spawn to exit.
func (s *Server) serveConn(c *net.UnixConn, id uint64, cred *unix.Ucred) {
	defer s.wg.Done()
	defer agentwire.LingerClose(c)
	log := s.log.With("conn", id, "peer_pid", cred.Pid, "peer_uid", cred.Uid, "peer_gid", cred.Gid)
	defer func() {
		if r := recover(); r != nil {
			log.Error("connection handler panicked", "panic", fmt.Sprint(r))
		}
	}()
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		log.Warn("connection refused", "reason", "session limit", "max_sessions", s.cfg.MaxSessions)
		s.reply(c, log, agentwire.TypeError, agentwire.ErrorMsg{Code: agentwire.CodeBusy, Message: "too many sessions"}.Encode())
		return
	}
	f, err := s.readRequest(c)
	if err != nil {
		s.replyFailure(c, log, "request refused", err)
		return
	}
	if f.Type == agentwire.TypeProbe {
		log.Debug("probe answered")
		s.reply(c, log, agentwire.TypeProbeOK, agentwire.EncodeProbeOK(s.instance))
		return
	}
	ss, acct, err := s.spawn(f)
	if err != nil {
		s.replyFailure(c, log, "spawn refused", err)
		return
	}
	s.supervise(c, ss, acct, log)
}

// readRequest waits (bounded) for the connection's one spawn or probe.
func (s *Server) readRequest(c *net.UnixConn) (agentwire.Frame, error) {
	if err := c.SetReadDeadline(time.Now().Add(s.requestTimeout)); err != nil {
		return agentwire.Frame{}, err
	}
	f, err := agentwire.ReadFrame(c, agentwire.MaxRequestFrame, agentwire.TypeSpawn, agentwire.TypeProbe)
	if err != nil {
		return f, err
	}
	if f.Type == agentwire.TypeProbe && (len(f.Body) != 0 || len(f.Files) != 0) {
		f.CloseFiles()
		return f, agentwire.Protocolf("probe frame with a body or fds")
	}
	return f, c.SetReadDeadline(time.Time{})
}

// supervise reports the session's start, forwards the sidecar's signals,
// hangs the session up when the sidecar's side closes, and reports the exit.
func (s *Server) supervise(c *net.UnixConn, ss *agentSession, acct login.Account, log *slog.Logger) {
	id := acct.ID
	log = log.With("user", id.User, "uid", id.UID, "pid", ss.proc.Pid())
	started := time.Now()
	ses, _ := ss.proc.AuditSession()
	if ses != 0 {
		log.Info("session started", "note", id.Note, "audit_ses", ses)
	} else {
		log.Info("session started", "note", id.Note, "audit_note", ss.proc.AuditSessionNote())
	}
	s.reply(c, log, agentwire.TypeStarted, agentwire.StartedMsg{User: id.User, UID: uint32(id.UID), GID: uint32(id.GID),
		Home: id.Home, Shell: id.Shell, Note: id.Note, AuditSes: ses, AuditNote: ss.proc.AuditSessionNote(), AuditReported: true,
		Instance: s.instance}.Encode())

	var closing atomic.Bool // set before this goroutine closes c under the reader
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer func() {
			if r := recover(); r != nil {
				log.Error("request reader panicked", "panic", fmt.Sprint(r))
				ss.proc.Hangup()
			}
		}()
		s.readSignals(c, ss.proc, log, &closing)
	}()

	exit, werr := ss.proc.Wait()
	s.forget(ss)
	switch {
	case werr != nil:
		log.Error("session lost", "err", werr.Error())
		s.reply(c, log, agentwire.TypeError, agentwire.ErrorMsg{Code: agentwire.CodeWait, Message: "wait for the session process failed"}.Encode())
	case ss.shutdown.Load():
		log.Info("session ended by agent shutdown", "duration", time.Since(started).String())
		s.reply(c, log, agentwire.TypeError, agentwire.ErrorMsg{Code: agentwire.CodeShutdown, Message: "the launch agent is shutting down"}.Encode())
	default:
		log.Info("session exited", "exit_code", exit.Code, "signal", exit.SignalName(), "duration", time.Since(started).String())
		s.reply(c, log, agentwire.TypeExit, agentwire.ExitMsg{Code: uint32(exit.Code), Signal: uint32(exit.Signal), Core: boolU32(exit.CoreDumped)}.Encode())
	}
	// The reader drains what the sidecar still sends until it closes
	// (agentwire.LingerClose's reason), bounded by agentwire.LingerTimeout.
	closing.Store(true)
	if c.CloseWrite() != nil || c.SetReadDeadline(time.Now().Add(agentwire.LingerTimeout)) != nil {
		c.Close()
	}
	<-readerDone
}

// readSignals forwards signal requests until the sidecar shuts its side
// (the hang-up), breaks the protocol, or closing is set.
func (s *Server) readSignals(c *net.UnixConn, p *login.Process, log *slog.Logger, closing *atomic.Bool) {
	for {
		f, err := agentwire.ReadFrame(c, agentwire.MaxRequestFrame, agentwire.TypeSignal)
		if closing.Load() {
			// The exit is reported: drain until the sidecar closes.
			f.CloseFiles()
			var we *agentwire.Error
			if err == nil || errors.As(err, &we) {
				continue
			}
			return
		}
		if err == nil && len(f.Files) != 0 {
			f.CloseFiles()
			err = agentwire.Protocolf("signal frame with fds")
		}
		var name string
		if err == nil {
			name, err = agentwire.DecodeSignal(f.Body)
		}
		sig, ok := launch.SignalByName(name)
		if err == nil && !ok {
			err = agentwire.Protocolf("signal name is not one of RFC 4254's")
		}
		if err != nil {
			if errors.Is(err, agentwire.ErrPeerClosed) {
				log.Info("sidecar hung up")
			} else {
				log.Warn("sidecar connection failed; hanging up", "err", err.Error())
				s.reply(c, log, agentwire.TypeError, agentwire.ErrorMsg{Code: agentwire.CodeProtocol, Message: err.Error()}.Encode())
			}
			p.Hangup()
			return
		}
		if err := p.Signal(sig); err != nil {
			log.Debug("signal not delivered", "signal", name, "err", err.Error())
		}
	}
}

// reply writes one reply frame, bounded; a failure is logged, as the
// sidecar then sees the connection end.
func (s *Server) reply(c *net.UnixConn, log *slog.Logger, typ agentwire.Type, body []byte) {
	if err := agentwire.WriteFrame(c, agentwire.MaxReplyFrame, time.Now().Add(agentReplyTimeout), typ, body); err != nil {
		log.Debug("reply not sent", "type", typ.String(), "err", err.Error())
	}
}

// replyFailure logs why a request was refused and tells the sidecar. A
// sidecar that closed without a request (EOF) gets no reply.
func (s *Server) replyFailure(c *net.UnixConn, log *slog.Logger, what string, err error) {
	if errors.Is(err, agentwire.ErrPeerClosed) {
		log.Info("connection closed before a request")
		return
	}
	code := agentwire.CodeProtocol
	var we *agentwire.Error
	if errors.As(err, &we) {
		code = we.Code
	}
	log.Warn(what, "code", code, "err", err.Error())
	s.reply(c, log, agentwire.TypeError, agentwire.ErrorMsg{Code: code, Message: err.Error()}.Encode())
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// checkConfig checks the allow-list: valid login names, and root only
// with AllowRoot.
func checkConfig(cfg Config) error {
	if len(cfg.Users) == 0 {
		return errors.New("agentd: agent: no allowed users")
	}
	for _, u := range cfg.Users {
		if !login.ValidLoginName(u) {
			return fmt.Errorf("agentd: agent: %q is not a valid login name", agentwire.Truncate(u, 64))
		}
		if u == "root" && !cfg.AllowRoot {
			return errors.New("agentd: agent: root is allowed only with AllowRoot")
		}
	}
	if err := checkPeerIDs(cfg.PeerUID, cfg.PeerGID); err != nil {
		return err
	}
	if cfg.MaxSessions < 0 || cfg.MaxSessions > 10000 {
		return errors.New("agentd: agent: MaxSessions out of range")
	}
	return nil
}

// forget removes a finished session from the server's set.
func (s *Server) forget(ss *agentSession) {
	s.mu.Lock()
	delete(s.sessions, ss)
	s.mu.Unlock()
	s.startMu.Lock()
	if s.leaders[ss.proc.Pid()] == ss { // the pid may already be another session's
		delete(s.leaders, ss.proc.Pid())
	}
	s.startMu.Unlock()
}
