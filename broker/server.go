// Package broker is the SSH server of aptl-kali-capture: it authenticates
// clients, serves session channels on a PTY whose master it keeps, and hands
// each session to a recorder and a launch adapter.
package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/diskstate"
	"github.com/aptl/aptl-kali-capture/internal/ratelog"
	"github.com/aptl/aptl-kali-capture/internal/witnessbudget"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/ship"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = gliderssh.ErrServerClosed

// Limits bound what one client, and all clients together, can make the
// server hold. Every field must be positive.
type Limits struct {
	MaxAuthTries       int           // authentication attempts per connection
	LoginGrace         time.Duration // time from TCP accept to completed authentication
	MaxConns           int           // open connections, authenticated or not
	MaxSessions        int           // session channels, all connections together
	MaxSessionsPerConn int           // session channels on one connection
	MaxEnvRequests     int           // env requests on one session channel

	// MaxStartups and PerSourceMaxStartups bound connections that have not
	// authenticated yet (preauth.go): in total, with random early drop,
	// and per source address. Full stays below MaxConns, so a flood of them
	// always leaves room for authenticated connections.
	MaxStartups          MaxStartups
	PerSourceMaxStartups int
	// PreauthEvictAfter is how long a connection must have gone
	// unauthenticated before a newcomer may take its place where a limit
	// is reached (preauth.go); at most LoginGrace (which closes it anyway).
	PreauthEvictAfter time.Duration
}

// DefaultLimits are sized for one lab: a handful of tool servers, each
// pooling a few sessions on a connection.
func DefaultLimits() Limits {
	return Limits{
		MaxAuthTries:       6,
		LoginGrace:         loginGrace,
		MaxConns:           64,
		MaxSessions:        64,
		MaxSessionsPerConn: 16,
		MaxEnvRequests:     64,

		MaxStartups: MaxStartups{Start: 16, Rate: 30, Full: 32},
		// One source alone never reaches Start, so a single flooding
		// address cannot make anyone else's connection a candidate for
		// early drop.
		PerSourceMaxStartups: 8,
		PreauthEvictAfter:    preauthEvictAfter,
	}
}

// preauthEvictAfter is the default: more than ten times a tool server's
// login (about 150 ms, see loginGrace), a fifth of the login grace.
const preauthEvictAfter = 2 * time.Second

// loginGrace is the default: a tool server (node ssh2) authenticates in
// about 150 ms, so 10 s is ample and frees a slot that a silent connection
// holds three times sooner than OpenSSH's 30 s.
const loginGrace = 10 * time.Second

// Config is everything the server needs; cmd/aptl-kali-capture builds it
// from flags and the environment.
type Config struct {
	HostKey        gossh.Signer    // serves SSH and signs the records' heads
	AuthorizedKeys *AuthorizedKeys // client keys allowed to log in
	Users          []string        // login names allowed to authenticate
	// UserExists reports whether a login name has an account the launcher
	// can run it as. An allowed name without one is refused at
	// authentication, as sshd refuses an "Invalid user". nil: every
	// allowed name runs (the launcher decides as whom, and records it).
	UserExists  func(name string) bool
	Launcher    launch.Launcher // starts session processes on the slave
	CaptureRoot string          // <root>/<run>/<session>/...
	AcceptEnv   []string        // env names (or PREFIX*) passed through besides the APTL_* ids
	Limits      Limits
	Logger      *slog.Logger // nil means slog.Default()
	// Sync is the records' durability; the host key signs their heads.
	Sync recorder.SyncMode
	// MaxTranscriptBytes caps what a typescript stores (0: no cap).
	MaxTranscriptBytes int64
	// Version goes into the SSH banner, SSH-2.0-aptl-kali-capture_<Version>;
	// it must hold no whitespace or '-' (RFC 4253 section 4.2). Empty: no
	// version in the banner.
	Version string
	// Algorithms the server offers; an empty list means the default one
	// (DefaultAlgorithms), never x/crypto's own defaults.
	Algorithms Algorithms
	// IsLocalAddr says which peer addresses belong to the server's own
	// network namespace, which the per-source pre-authentication limit
	// counts as one source (localaddrs.go). nil means loopback and the
	// namespace's interface addresses; tests declare their own.
	IsLocalAddr func(netip.Addr) bool
	// Witnesses are recorded beside each session's terminal, in its chain
	// (recorder/witness.go): the pcap class when selected.
	Witnesses []recorder.WitnessSource
	// PTYEOF is what a client's EOF on a PTY session does (session.go);
	// PTYEOFWait bounds PTYEOFChar's wait for the session's end (0:
	// DefaultPTYEOFWait).
	PTYEOF     PTYEOF
	PTYEOFWait time.Duration
	// ClientAlive probes silent connections and closes dead ones
	// (keepalive.go); the zero value disables it.
	ClientAlive ClientAlive
	// Disk is the capture volume's state and WitnessBudget the witnesses'
	// budget across sessions (recorder/disk.go); nil: neither.
	Disk          *diskstate.Monitor
	WitnessBudget *witnessbudget.Budget
	// SessionKeys gives each session a signing key of its own, and
	// HostKeyFallback lets the host key sign one the pool had none for
	// (recorder.Options says how); nil: the host key signs every session.
	SessionKeys     recorder.KeySource
	HostKeyFallback bool
	// Shipper ships each session's evidence off the box while it runs
	// (package ship); nil: the local volume only.
	Shipper *ship.Shipper
}

func (c *Config) check() error {
	switch {
	case c.HostKey == nil:
		return errors.New("broker: no host key")
	case c.AuthorizedKeys == nil || c.AuthorizedKeys.Len() == 0:
		return errors.New("broker: no authorized keys")
	case len(c.Users) == 0:
		return errors.New("broker: no allowed users")
	case c.Launcher == nil:
		return errors.New("broker: no launch adapter")
	case c.CaptureRoot == "":
		return errors.New("broker: no capture root")
	}
	if c.ClientAlive.Interval < 0 || c.ClientAlive.CountMax < 0 || (c.ClientAlive.Interval > 0 && c.ClientAlive.CountMax == 0) {
		return fmt.Errorf("broker: client alive interval %v with count max %d: both must be positive to enable it", c.ClientAlive.Interval, c.ClientAlive.CountMax)
	}
	if _, ok := ptyEOFNames[c.PTYEOF]; !ok || c.PTYEOFWait < 0 {
		return fmt.Errorf("broker: pty EOF mode %d with wait %v: not a mode, or a negative wait", c.PTYEOF, c.PTYEOFWait)
	}
	if err := c.Algorithms.orDefault().Check(); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	l := c.Limits
	if l.MaxAuthTries <= 0 || l.LoginGrace <= 0 || l.MaxConns <= 0 || l.MaxSessions <= 0 ||
		l.MaxSessionsPerConn <= 0 || l.MaxEnvRequests <= 0 || l.PerSourceMaxStartups <= 0 {
		return fmt.Errorf("broker: every limit must be positive: %+v", l)
	}
	return l.checkPreauth()
}

// checkPreauth relates the pre-authentication limits to each other and to
// MaxConns.
func (l Limits) checkPreauth() error {
	if err := l.MaxStartups.Validate(); err != nil {
		return fmt.Errorf("broker: max startups %w", err)
	}
	if l.MaxStartups.Full >= l.MaxConns {
		return fmt.Errorf("broker: max startups full (%d) must be below max conns (%d), or unauthenticated connections could take every slot", l.MaxStartups.Full, l.MaxConns)
	}
	if l.PerSourceMaxStartups > l.MaxStartups.Full {
		return fmt.Errorf("broker: per-source max startups (%d) must not exceed max startups full (%d)", l.PerSourceMaxStartups, l.MaxStartups.Full)
	}
	if l.PreauthEvictAfter <= 0 || l.PreauthEvictAfter > l.LoginGrace {
		return fmt.Errorf("broker: preauth evict after (%v) must be positive and at most the login grace (%v)", l.PreauthEvictAfter, l.LoginGrace)
	}
	return nil
}

// Server is the SSH broker. Lifecycle: New, Serve (once per listener), then
// Shutdown or Close.
type Server struct {
	cfg     Config
	log     *slog.Logger
	ssh     *gliderssh.Server
	gate    *preauthGate
	drops   *ratelog.Log
	anonSeq atomic.Uint64

	mu sync.Mutex // protects the following
	// closing is set once by Shutdown; no session starts after it.
	closing  bool
	sessions map[*session]struct{}
	// listeners are the listeners Serve is serving, which Shutdown closes:
	// gliderlabs closes only those it has started tracking, and Serve
	// installs the loopback guard first, so a SIGTERM in that moment
	// would leave Serve accepting after Shutdown returned.
	listeners map[net.Listener]struct{}
	// sessionsWG counts sessions from admission until their record is final.
	sessionsWG sync.WaitGroup
}

// New checks cfg and builds a server that has not started listening.
func New(cfg Config) (*Server, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PTYEOFWait == 0 {
		cfg.PTYEOFWait = DefaultPTYEOFWait
	}
	cfg.AuthorizedKeys.setLogger(cfg.Logger)
	srv := &Server{cfg: cfg, log: cfg.Logger, sessions: make(map[*session]struct{}), listeners: make(map[net.Listener]struct{}),
		gate: newPreauthGate(cfg.Limits, cfg.IsLocalAddr), drops: newDropLog(cfg.Logger)}
	srv.ssh = &gliderssh.Server{
		Version:              bannerSoftware(cfg.Version),
		HostSigners:          []gliderssh.Signer{cfg.HostKey},
		PublicKeyHandler:     srv.mayAuthenticate,
		ConnCallback:         srv.onConn,
		ServerConfigCallback: srv.sshConfig,
		// Our own "session" handler replaces gliderlabs' (see session.go);
		// no other channel type is served, so direct-tcpip, forwarded-tcpip
		// and x11 channels are rejected as unknown types.
		ChannelHandlers: map[string]gliderssh.ChannelHandler{"session": srv.handleSession},
		RequestHandlers: map[string]gliderssh.RequestHandler{
			"keepalive@openssh.com": answerKeepalive,
		},
		SubsystemHandlers: map[string]gliderssh.SubsystemHandler{},
	}
	return srv, nil
}

// bannerSoftware is the banner's softwareversion: the product, and the
// version when there is one.
func bannerSoftware(version string) string {
	if version == "" {
		return "aptl-kali-capture"
	}
	return "aptl-kali-capture_" + version
}

// Serve accepts connections on ln until Shutdown, and then returns
// ErrServerClosed; after Shutdown began it closes ln and returns it at
// once. A TCP listener gets the loopback guard (ingress_linux.go), kept up
// to date while Serve runs, so that a handshake forged inside the
// namespace never completes; each connection is admitted or refused as it
// is accepted (preauth.go).
func (srv *Server) Serve(ln net.Listener) error {
	srv.mu.Lock()
	if srv.closing {
		srv.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	srv.listeners[ln] = struct{}{}
	srv.mu.Unlock()
	defer func() {
		srv.mu.Lock()
		delete(srv.listeners, ln)
		srv.mu.Unlock()
	}()
	guard, err := guardListener(ln, srv.log)
	switch {
	case err != nil:
		srv.log.Error("loopback guard not installed: handshakes forged inside the network namespace can hold pre-authentication slots",
			"addr", ln.Addr().String(), "err", err.Error())
	case guard != nil:
		stop := make(chan struct{})
		defer close(stop)
		go guard.run(stop)
	}
	err = srv.ssh.Serve(newGateListener(ln, srv.gate, srv.drops, srv.log))
	// A Shutdown that closed ln before the SSH server took it (the guard
	// is installed in between) ends Serve with the listener's error: it
	// is the closed server all the same.
	srv.mu.Lock()
	closing := srv.closing
	srv.mu.Unlock()
	if closing && err != nil {
		return ErrServerClosed
	}
	return err
}

// UnauthenticatedConns reports the open connections that have not
// authenticated yet.
func (srv *Server) UnauthenticatedConns() int {
	return srv.gate.unauthenticated()
}

// closeListeners closes the listeners Serve is serving.
func (srv *Server) closeListeners() {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for ln := range srv.listeners {
		ln.Close()
	}
}

// finalizeGrace bounds how long Shutdown waits, once its context expired
// and the connections are closed, for sessions to write their trailers.
// With no client left to block delivery, a session needs at most the
// launcher's wait after a hangup (2 s grace, plus 3 s for the agent's exit
// report) and the drain (drainMax, 2 s): 7 s, with room to spare.
const finalizeGrace = 10 * time.Second

// Shutdown stops new sessions and ends every open one with close reason
// "sidecar-shutdown", then closes the listeners and connections. If ctx
// expires first (a client that does not read can hold its session's
// output), it closes the connections anyway, so output is recorded without
// being delivered, and waits up to finalizeGrace more for the records to be
// finalized. It returns ctx's error in that case.
func (srv *Server) Shutdown(ctx context.Context) error {
	srv.mu.Lock()
	srv.closing = true
	open := make([]*session, 0, len(srv.sessions))
	for ss := range srv.sessions {
		open = append(open, ss)
	}
	srv.mu.Unlock()

	for _, ss := range open {
		ss.stop(errShutdown)
	}
	done := make(chan struct{})
	go func() {
		srv.sessionsWG.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	// gliderlabs' Close first: its accept loop then reads the closed
	// listener as the shutdown it is, not as an error.
	cerr := srv.ssh.Close()
	srv.closeListeners()
	if err == nil {
		return cerr
	}
	select {
	case <-done:
	case <-time.After(finalizeGrace):
		srv.log.Error("sessions not finalized at shutdown", "open_sessions", srv.ActiveSessions())
	}
	return err
}

// ActiveSessions reports the number of sessions admitted and not yet final.
func (srv *Server) ActiveSessions() int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return len(srv.sessions)
}

// connState is per connection; it lives in the gliderlabs context from
// ConnCallback on and is read-only except for the atomic counter.
type connState struct {
	id       string
	log      *slog.Logger
	admitted *gatedConn // the gate's record: unauthenticated until a key is verified
	sessions atomic.Int32

	// Client alive (keepalive.go): the last read from the client, in Unix
	// nanoseconds; closed once the connection closes; the loop's start.
	lastRead  atomic.Int64
	closed    chan struct{}
	aliveOnce sync.Once
}

type connStateKey struct{}

func connStateOf(ctx gliderssh.Context) *connState {
	cs, _ := ctx.Value(connStateKey{}).(*connState)
	return cs
}

// onConn takes a connection the gate admitted (Serve), refuses it during
// shutdown, and enforces the login grace time. gliderlabs/ssh resets the
// socket deadline on every read, so the grace time is a timer that closes
// the connection unless a key has been verified by then.
func (srv *Server) onConn(ctx gliderssh.Context, conn net.Conn) net.Conn {
	admitted, ok := conn.(*gatedConn)
	srv.mu.Lock()
	closing := srv.closing
	srv.mu.Unlock()
	if closing || !ok {
		reason := "shutdown"
		if !ok {
			reason = "not admitted through Serve"
		}
		srv.log.Warn("connection refused", "remote", conn.RemoteAddr().String(), "reason", reason)
		conn.Close()
		return nil
	}

	cs := &connState{id: newConnID(), admitted: admitted, closed: make(chan struct{})}
	cs.noteRead()
	cs.log = srv.log.With("conn", cs.id)
	ctx.SetValue(connStateKey{}, cs)
	cs.log.Info("connection opened", "remote", conn.RemoteAddr().String())

	grace := time.AfterFunc(srv.cfg.Limits.LoginGrace, func() {
		if !admitted.authenticated() {
			cs.log.Warn("login grace time exceeded; closing connection")
			conn.Close()
		}
	})
	return &trackedConn{Conn: conn, onRead: cs.noteRead, onClose: func() {
		close(cs.closed)
		grace.Stop()
		cs.log.Info("connection closed")
	}}
}

// trackedConn runs onRead after every read that got bytes, and onClose
// once, on the first Close.
type trackedConn struct {
	net.Conn
	once    sync.Once
	onRead  func()
	onClose func()
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.onRead()
	}
	return n, err
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.onClose)
	return err
}

// sshConfig adds what gliderlabs/ssh does not expose: the algorithms, the
// auth attempt bound, an auth log, and the verified-key hook, which also
// releases the connection's pre-authentication slot.
func (srv *Server) sshConfig(ctx gliderssh.Context) *gossh.ServerConfig {
	cs := connStateOf(ctx)
	algs := srv.cfg.Algorithms.orDefault()
	return &gossh.ServerConfig{
		Config: gossh.Config{
			KeyExchanges: algs.KeyExchanges,
			Ciphers:      algs.Ciphers,
			MACs:         algs.MACs,
		},
		MaxAuthTries: srv.cfg.Limits.MaxAuthTries,
		AuthLogCallback: func(md gossh.ConnMetadata, method string, err error) {
			// A refused public key was logged with its fingerprint and
			// reason by mayAuthenticate; other methods are never accepted.
			if err != nil && method != "none" && method != "publickey" {
				cs.log.Info("authentication failed", "user", logSafe(md.User()), "remote", md.RemoteAddr().String(),
					"method", logSafe(method), "reason", "method not accepted (public key only)")
			}
		},
		// PublicKeyCallback (gliderlabs' mayAuthenticate) also runs for keys
		// the client only offers; this one runs once the client has proved
		// it holds the key, so only here is the fingerprint the identity.
		VerifiedPublicKeyCallback: func(md gossh.ConnMetadata, key gossh.PublicKey, _ *gossh.Permissions, _ string) (*gossh.Permissions, error) {
			fp := gossh.FingerprintSHA256(key)
			cs.log.Info("authenticated", "user", logSafe(md.User()), "key", fp)
			// From here on the connection no longer holds a
			// pre-authentication slot (preauth.go), so logged-in clients
			// never count against MaxStartups.
			cs.admitted.markAuthenticated()
			return &gossh.Permissions{Extensions: map[string]string{permKeyFingerprint: fp}}, nil
		},
	}
}

const permKeyFingerprint = "aptl-key-fp"

// mayAuthenticate is the public key policy: an allowed login name that has
// an account, and a key from the authorized_keys file. A refusal is logged
// as sshd logs it: the address, the offered key's fingerprint and why.
// x/crypto asks once per offered key, and MaxAuthTries bounds the keys.
func (srv *Server) mayAuthenticate(ctx gliderssh.Context, key gliderssh.PublicKey) bool {
	reason := authRefusal(srv.cfg, ctx.User(), key)
	if reason == "" {
		return true
	}
	log := srv.log
	if cs := connStateOf(ctx); cs != nil {
		log = cs.log
	}
	log.Warn("authentication refused", "user", logSafe(ctx.User()), "remote", ctx.RemoteAddr().String(),
		"key", gossh.FingerprintSHA256(key), "reason", reason)
	return false
}

// authRefusal returns why user may not log in with key, or "".
func authRefusal(cfg Config, user string, key gossh.PublicKey) string {
	switch {
	case !slices.Contains(cfg.Users, user):
		return "user not allowed"
	case cfg.UserExists != nil && !cfg.UserExists(user):
		return "invalid user: no such account"
	case !cfg.AuthorizedKeys.Contains(key):
		return "key not authorized"
	}
	return ""
}

// answerKeepalive replies to OpenSSH and node ssh2 keepalives. Either reply
// proves liveness to those clients; success says we understood.
func answerKeepalive(gliderssh.Context, *gliderssh.Server, *gossh.Request) (bool, []byte) {
	return true, nil
}

// admit registers a new session channel unless a limit or shutdown forbids it.
func (srv *Server) admit(ss *session) error {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	switch {
	case srv.closing:
		return errShutdown
	case len(srv.sessions) >= srv.cfg.Limits.MaxSessions:
		return fmt.Errorf("server session limit (%d) reached", srv.cfg.Limits.MaxSessions)
	case int(ss.conn.sessions.Load()) >= srv.cfg.Limits.MaxSessionsPerConn:
		return fmt.Errorf("per-connection session limit (%d) reached", srv.cfg.Limits.MaxSessionsPerConn)
	}
	ss.conn.sessions.Add(1)
	srv.sessions[ss] = struct{}{}
	srv.sessionsWG.Add(1)
	return nil
}

func (srv *Server) release(ss *session) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	ss.conn.sessions.Add(-1)
	delete(srv.sessions, ss)
	srv.sessionsWG.Done()
}

func (srv *Server) recorderOptions() recorder.Options {
	return recorder.Options{Signer: srv.cfg.HostKey, Sync: srv.cfg.Sync, MaxBytes: srv.cfg.MaxTranscriptBytes, Witnesses: srv.cfg.Witnesses,
		Disk: srv.cfg.Disk, Budget: srv.cfg.WitnessBudget, SessionKeys: srv.cfg.SessionKeys, HostKeyFallback: srv.cfg.HostKeyFallback,
		Shipper: srv.cfg.Shipper}
}

// nextAnonID returns a fresh generated session id, for a session that
// supplied none or an invalid one (docs/RECORD.md, "What a session leaves").
func (srv *Server) nextAnonID() string {
	return fmt.Sprintf("anon-%d-%d", time.Now().Unix(), srv.anonSeq.Add(1))
}

func newConnID() string {
	var b [6]byte
	rand.Read(b[:])
	return "c-" + hex.EncodeToString(b[:])
}
