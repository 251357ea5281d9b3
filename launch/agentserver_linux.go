package launch

// This file runs in aptl-launch-agent, in the workload container (as root
// there): it accepts the sidecar's connections, starts each session's login
// shell on the slave it receives, and reports the exit (wire_linux.go).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// DefaultAgentMaxSessions bounds concurrent connections to the agent, as
	// the broker's default MaxSessions (64) bounds sessions.
	DefaultAgentMaxSessions = 64
	// agentRequestTimeout bounds the wait for the first request on a connection.
	agentRequestTimeout = 10 * time.Second
	// agentReplyTimeout bounds each reply written to the sidecar.
	agentReplyTimeout = 5 * time.Second
)

// ErrAgentServerClosed is returned by Serve after Shutdown.
var ErrAgentServerClosed = errors.New("launch: agent server closed")

// AgentConfig is what the agent's server may do. The sidecar cannot change
// any of it: the wire carries no settings.
type AgentConfig struct {
	Users     []string // login names the agent may start sessions as
	AllowRoot bool     // "root", or any uid-0 account, may be started
	// InsecureAllowSamePIDNamespace accepts peers inside the agent's own PID
	// namespace, i.e. any workload process. Development and tests only.
	InsecureAllowSamePIDNamespace bool
	// PeerUID and PeerGID are the sidecar's credentials as SO_PEERCRED
	// reports them in the agent's user namespace (0 and 0, root, unless
	// the sidecar runs as another user). Any other peer is refused, in the
	// development mode too.
	PeerUID, PeerGID int
	MaxSessions      int // concurrent connections; 0 means DefaultAgentMaxSessions
	Logger           *slog.Logger
}

// AgentServer serves the agent's side of the wire protocol.
//
// Lock order: mu before startMu. Fields not under a lock are set by
// NewAgentServer and immutable.
type AgentServer struct {
	cfg                   AgentConfig
	users                 map[string]bool
	passwdPath, groupPath string // the workload's own files; tests use fixtures
	log                   *slog.Logger
	slots                 chan struct{} // one per open connection
	refusals              *refusalLog   // refused peers, rate-limited
	requestTimeout        time.Duration // agentRequestTimeout; tests shorten it
	nextConn              atomic.Uint64

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
	proc     *localProcess
	shutdown atomic.Bool // set by Shutdown: report an error instead of the exit
}

// NewAgentServer checks cfg and returns a server. Like NewLocal, the first
// call makes signals this process ignores caught instead, so sessions start
// with default dispositions (sigdisp_linux.go).
func NewAgentServer(cfg AgentConfig) (*AgentServer, error) {
	if err := checkAgentConfig(cfg); err != nil {
		return nil, err
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultAgentMaxSessions
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	catchIgnoredSignalsOnce.Do(catchIgnoredSignals)
	s := &AgentServer{cfg: cfg, users: map[string]bool{}, passwdPath: systemPasswd, groupPath: systemGroup,
		log: cfg.Logger, slots: make(chan struct{}, cfg.MaxSessions), refusals: newRefusalLog(cfg.Logger),
		requestTimeout: agentRequestTimeout, sessions: map[*agentSession]struct{}{}, leaders: map[int]*agentSession{}}
	for _, u := range cfg.Users {
		s.users[u] = true
	}
	return s, nil
}

// ListenAgent listens on socket (a path, or "@name" for an abstract socket).
// A path is created with mode 0600; a stale socket file left by a dead agent
// is replaced, anything else at the path is an error.
func ListenAgent(socket string) (*net.UnixListener, error) {
	if err := CheckAgentSocket(socket); err != nil {
		return nil, err
	}
	if socket[0] != '@' {
		if err := removeStaleSocket(socket); err != nil {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("launch: listen %s: %w", socket, err)
	}
	if socket[0] != '@' {
		// connect(2) needs write permission on the socket file (unix(7)). Until
		// this chmod the file has bind's mode under the umask, which under the
		// usual 022 already denies write to everyone but the agent's own user.
		if err := os.Chmod(socket, 0o600); err != nil {
			ln.Close()
			return nil, fmt.Errorf("launch: chmod %s: %w", socket, err)
		}
	}
	return ln, nil
}

// removeStaleSocket removes a socket file nobody listens on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("launch: %s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("launch: another agent listens on %s", path)
	}
	return os.Remove(path)
}

// Serve accepts connections on ln until Shutdown, then returns ErrAgentServerClosed.
func (s *AgentServer) Serve(ln *net.UnixListener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrAgentServerClosed
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
				return ErrAgentServerClosed
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
			return ErrAgentServerClosed
		}
		go s.serveConn(c, id, cred)
	}
}

func (s *AgentServer) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// track counts a connection goroutine unless the server is closing.
func (s *AgentServer) track() bool {
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
func (s *AgentServer) Shutdown(ctx context.Context) error {
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
	s.refusals.flush()
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
func (s *AgentServer) serveConn(c *net.UnixConn, id uint64, cred *unix.Ucred) {
	defer s.wg.Done()
	defer lingerClose(c)
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
		s.reply(c, log, msgError, errorMsg{code: errCodeBusy, message: "too many sessions"}.encode())
		return
	}
	f, err := s.readRequest(c)
	if err != nil {
		s.replyFailure(c, log, "request refused", err)
		return
	}
	if f.typ == msgProbe {
		log.Debug("probe answered")
		s.reply(c, log, msgProbeOK, nil)
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
func (s *AgentServer) readRequest(c *net.UnixConn) (frame, error) {
	if err := c.SetReadDeadline(time.Now().Add(s.requestTimeout)); err != nil {
		return frame{}, err
	}
	f, err := readFrame(c, maxRequestFrame, msgSpawn, msgProbe)
	if err != nil {
		return f, err
	}
	if f.typ == msgProbe && (len(f.body) != 0 || len(f.files) != 0) {
		f.closeFiles()
		return f, protoErrorf("probe frame with a body or fds")
	}
	return f, c.SetReadDeadline(time.Time{})
}

// supervise reports the session's start, forwards the sidecar's signals,
// hangs the session up when the sidecar's side closes, and reports the exit.
func (s *AgentServer) supervise(c *net.UnixConn, ss *agentSession, acct account, log *slog.Logger) {
	id := acct.id
	log = log.With("user", id.User, "uid", id.UID, "pid", ss.proc.pid)
	started := time.Now()
	log.Info("session started", "note", id.Note)
	s.reply(c, log, msgStarted, startedMsg{user: id.User, uid: uint32(id.UID), gid: uint32(id.GID),
		home: id.Home, shell: id.Shell, note: id.Note}.encode())

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
		s.reply(c, log, msgError, errorMsg{code: errCodeWait, message: "wait for the session process failed"}.encode())
	case ss.shutdown.Load():
		log.Info("session ended by agent shutdown", "duration", time.Since(started).String())
		s.reply(c, log, msgError, errorMsg{code: errCodeShutdown, message: "the launch agent is shutting down"}.encode())
	default:
		log.Info("session exited", "exit_code", exit.Code, "signal", exit.SignalName(), "duration", time.Since(started).String())
		s.reply(c, log, msgExit, exitMsg{code: uint32(exit.Code), signal: uint32(exit.Signal), core: boolU32(exit.CoreDumped)}.encode())
	}
	// The reader drains what the sidecar still sends until it closes
	// (lingerClose's reason), bounded by lingerTimeout.
	closing.Store(true)
	if c.CloseWrite() != nil || c.SetReadDeadline(time.Now().Add(lingerTimeout)) != nil {
		c.Close()
	}
	<-readerDone
}

// readSignals forwards signal requests until the sidecar shuts its side
// (the hang-up), breaks the protocol, or closing is set.
func (s *AgentServer) readSignals(c *net.UnixConn, p *localProcess, log *slog.Logger, closing *atomic.Bool) {
	for {
		f, err := readFrame(c, maxRequestFrame, msgSignal)
		if closing.Load() {
			// The exit is reported: drain until the sidecar closes.
			f.closeFiles()
			var we *wireError
			if err == nil || errors.As(err, &we) {
				continue
			}
			return
		}
		if err == nil && len(f.files) != 0 {
			f.closeFiles()
			err = protoErrorf("signal frame with fds")
		}
		var name string
		if err == nil {
			name, err = decodeSignal(f.body)
		}
		sig, ok := SignalByName(name)
		if err == nil && !ok {
			err = protoErrorf("signal name is not one of RFC 4254's")
		}
		if err != nil {
			if errors.Is(err, errPeerClosed) {
				log.Info("sidecar hung up")
			} else {
				log.Warn("sidecar connection failed; hanging up", "err", err.Error())
				s.reply(c, log, msgError, errorMsg{code: errCodeProtocol, message: err.Error()}.encode())
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
func (s *AgentServer) reply(c *net.UnixConn, log *slog.Logger, typ msgType, body []byte) {
	if err := writeFrame(c, maxReplyFrame, time.Now().Add(agentReplyTimeout), typ, body); err != nil {
		log.Debug("reply not sent", "type", typ.String(), "err", err.Error())
	}
}

// replyFailure logs why a request was refused and tells the sidecar. A
// sidecar that closed without a request (EOF) gets no reply.
func (s *AgentServer) replyFailure(c *net.UnixConn, log *slog.Logger, what string, err error) {
	if errors.Is(err, errPeerClosed) {
		log.Info("connection closed before a request")
		return
	}
	code := errCodeProtocol
	var we *wireError
	if errors.As(err, &we) {
		code = we.code
	}
	log.Warn(what, "code", code, "err", err.Error())
	s.reply(c, log, msgError, errorMsg{code: code, message: err.Error()}.encode())
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// checkAgentConfig checks the allow-list: valid login names, and root only
// with AllowRoot.
func checkAgentConfig(cfg AgentConfig) error {
	if len(cfg.Users) == 0 {
		return errors.New("launch: agent: no allowed users")
	}
	for _, u := range cfg.Users {
		if !ValidLoginName(u) {
			return fmt.Errorf("launch: agent: %q is not a valid login name", truncate(u, 64))
		}
		if u == "root" && !cfg.AllowRoot {
			return errors.New("launch: agent: root is allowed only with AllowRoot")
		}
	}
	if err := checkPeerIDs(cfg.PeerUID, cfg.PeerGID); err != nil {
		return err
	}
	if cfg.MaxSessions < 0 || cfg.MaxSessions > 10000 {
		return errors.New("launch: agent: MaxSessions out of range")
	}
	return nil
}

// ValidLoginName reports whether u is in the portable user name set (POSIX 3.437) that
// useradd accepts: letters, digits, '.', '_', '-', not starting with '-'.
func ValidLoginName(u string) bool {
	if u == "" || len(u) > 32 || u[0] == '-' {
		return false
	}
	for _, c := range []byte(u) {
		if !(c == '.' || c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// forget removes a finished session from the server's set.
func (s *AgentServer) forget(ss *agentSession) {
	s.mu.Lock()
	delete(s.sessions, ss)
	s.mu.Unlock()
	s.startMu.Lock()
	if s.leaders[ss.proc.pid] == ss { // the pid may already be another session's
		delete(s.leaders, ss.proc.pid)
	}
	s.startMu.Unlock()
}
