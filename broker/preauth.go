package broker

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/ratelog"
)

// Pre-authentication admission. The workload shares the sidecar's network
// namespace, so it can open TCP connections to the SSH port at will; a
// connection that never authenticates would otherwise hold a slot for the
// whole login grace. Every accepted connection is therefore admitted or
// refused here, in the accept loop, before gliderlabs/ssh starts a goroutine
// or x/crypto allocates anything for it, and it counts as unauthenticated
// until a public key is verified (Server.sshConfig).

// MaxStartups is OpenSSH's MaxStartups "start:rate:full" for connections
// that have not authenticated yet: below Start none is refused; from Start
// on, a new one is refused with probability Rate percent, rising linearly
// to 100 percent at Full; at Full and above every new one is refused.
type MaxStartups struct {
	Start, Rate, Full int
}

// ParseMaxStartups reads OpenSSH's syntax: "start:rate:full", or a single
// number N meaning a hard limit (N:100:N).
func ParseMaxStartups(s string) (MaxStartups, error) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) != 1 && len(parts) != 3 {
		return MaxStartups{}, fmt.Errorf("%q is not start:rate:full or a single number", s)
	}
	nums := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return MaxStartups{}, fmt.Errorf("%q is not start:rate:full or a single number", s)
		}
		nums[i] = n
	}
	m := MaxStartups{Start: nums[0], Rate: 100, Full: nums[0]}
	if len(nums) == 3 {
		m = MaxStartups{Start: nums[0], Rate: nums[1], Full: nums[2]}
	}
	return m, m.Validate()
}

func (m MaxStartups) String() string { return fmt.Sprintf("%d:%d:%d", m.Start, m.Rate, m.Full) }

// Validate applies OpenSSH's rules: 1 <= start <= full, 1 <= rate <= 100.
func (m MaxStartups) Validate() error {
	switch {
	case m.Start < 1 || m.Full < 1:
		return fmt.Errorf("%s: start and full must be at least 1", m)
	case m.Start > m.Full:
		return fmt.Errorf("%s: start must not exceed full", m)
	case m.Rate < 1 || m.Rate > 100:
		return fmt.Errorf("%s: rate must be a percentage from 1 to 100", m)
	}
	return nil
}

// drop decides, for a new connection while unauth connections are still
// unauthenticated, whether to refuse it. roll returns a uniform integer in
// [0, 100); it is called only between Start and Full, where chance decides.
// The arithmetic is OpenSSH's (sshd.c should_drop_connection), so the same
// setting behaves the same way.
func (m MaxStartups) drop(unauth int, roll func() int) bool {
	switch {
	case unauth < m.Start:
		return false
	case unauth >= m.Full || m.Rate == 100:
		return true
	}
	p := m.Rate + (100-m.Rate)*(unauth-m.Start)/(m.Full-m.Start)
	return roll() < p
}

// Reasons a connection is refused at accept; each is also the line the
// client receives (see refuseConn).
const (
	refusedConnLimit  = "connection limit reached"
	refusedPerSource  = "too many unauthenticated connections from this address"
	refusedMaxStartup = "too many unauthenticated connections"
)

// sourceKey is what the per-source limit counts by: the peer's IP address,
// or, for every address local to the server's network namespace, the one
// key {local: true} (localaddrs.go).
type sourceKey struct {
	addr  netip.Addr
	local bool
}

// preauthGate counts open connections, and unauthenticated ones in total
// and per source, and admits or refuses each new one.
//
// Where a limit is reached, the newcomer may take the place of an older
// unauthenticated connection instead of being refused: one that has held
// its slot for at least evictAfter without authenticating (a tool server
// authenticates in about 150 ms), from the newcomer's own source when that
// source is at its limit, else from the source holding the most slots,
// provided it holds more than the newcomer's. So idle connections cannot
// keep the port closed: not the workload's, and not a local user's on the
// Docker host, whose connections arrive through the engine's port
// publishing from the gateway's address, as the tool servers' on that host
// do. A login in progress is younger than evictAfter and is never cut; a
// source never loses a slot to a source holding as many. What this cannot
// do is tell two clients behind one address apart: one that reopens each
// connection as it is closed keeps that address's slots young and contests
// them (docs/ARCHITECTURE.md, "Admission before authentication").
// Evictions are bounded by the slots: each takes a connection at least
// evictAfter old, so there are at most Full+perSource of them per
// evictAfter.
type preauthGate struct {
	startups   MaxStartups
	perSource  int
	maxConns   int
	evictAfter time.Duration
	roll       func() int              // uniform in [0, 100)
	now        func() time.Time        // time.Now; tests replace it
	isLocal    func(a netip.Addr) bool // an address of the server's own network namespace

	mu      sync.Mutex                 // protects the following
	conns   int                        // open connections, authenticated or not
	unauth  int                        // open connections not yet authenticated
	sources map[sourceKey][]*gatedConn // each source's unauthenticated connections, oldest first
}

// newPreauthGate builds the gate; isLocal nil means the namespace's own
// addresses as the kernel lists them (localAddrs).
func newPreauthGate(l Limits, isLocal func(netip.Addr) bool) *preauthGate {
	if isLocal == nil {
		isLocal = newLocalAddrs().contains
	}
	return &preauthGate{
		startups: l.MaxStartups, perSource: l.PerSourceMaxStartups, maxConns: l.MaxConns, evictAfter: l.PreauthEvictAfter,
		roll: func() int { return rand.IntN(100) }, now: time.Now, isLocal: isLocal, sources: make(map[sourceKey][]*gatedConn),
	}
}

// keyOf is the per-source key of a peer address (sourceOf).
func (g *preauthGate) keyOf(a netip.Addr) sourceKey {
	if a.IsValid() && g.isLocal(a) {
		return sourceKey{local: true}
	}
	return sourceKey{addr: a}
}

// An eviction: the connection that made room and why.
type eviction struct {
	conn   *gatedConn
	age    time.Duration
	reason string // refusedPerSource or refusedMaxStartup: the limit it made room under
}

// admit counts c, a new connection, as unauthenticated, or returns why it
// is refused. When it took an older connection's place, that connection is
// returned: it no longer counts, and the caller closes it.
func (g *preauthGate) admit(c *gatedConn) (evicted *eviction, refused string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if g.conns >= g.maxConns {
		// Only authenticated connections can fill max-conns (Full is
		// below it); making room among them is no business of this gate.
		return nil, refusedConnLimit
	}
	switch {
	case len(g.sources[c.source]) >= g.perSource:
		if evicted = g.evictableLocked(g.sources[c.source], now); evicted == nil {
			return nil, refusedPerSource
		}
		evicted.reason = refusedPerSource
	case g.startups.drop(g.unauth, g.roll):
		if evicted = g.busiestEvictableLocked(c.source, now); evicted == nil {
			return nil, refusedMaxStartup
		}
		evicted.reason = refusedMaxStartup
	}
	if evicted != nil {
		g.closeLocked(evicted.conn)
	}
	c.admittedAt, c.pending = now, true
	g.conns++
	g.unauth++
	g.sources[c.source] = append(g.sources[c.source], c)
	return evicted, ""
}

// evictableLocked is the oldest of list (one source's, oldest first) if it
// has been unauthenticated for evictAfter.
func (g *preauthGate) evictableLocked(list []*gatedConn, now time.Time) *eviction {
	if len(list) == 0 {
		return nil
	}
	if age := now.Sub(list[0].admittedAt); age >= g.evictAfter {
		return &eviction{conn: list[0], age: age}
	}
	return nil
}

// busiestEvictableLocked picks, among the sources holding more slots than
// newcomer's, the one holding the most (ties: the one whose oldest is
// oldest) whose oldest connection is evictable, and returns that
// connection. The scan is over at most Full sources.
func (g *preauthGate) busiestEvictableLocked(newcomer sourceKey, now time.Time) *eviction {
	own := len(g.sources[newcomer])
	var best *eviction
	bestLen := 0
	for _, list := range g.sources {
		if len(list) <= own || len(list) < bestLen {
			continue
		}
		e := g.evictableLocked(list, now)
		if e == nil {
			continue
		}
		if len(list) > bestLen || e.age > best.age {
			best, bestLen = e, len(list)
		}
	}
	return best
}

// settleLocked moves c out of the unauthenticated count.
func (g *preauthGate) settleLocked(c *gatedConn) {
	g.unauth--
	list := g.sources[c.source]
	if i := slices.Index(list, c); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(g.sources, c.source)
	} else {
		g.sources[c.source] = list
	}
}

// closeLocked counts c as closed; the caller closes its socket.
func (g *preauthGate) closeLocked(c *gatedConn) {
	if c.closed {
		return
	}
	c.closed = true
	g.conns--
	if c.pending {
		c.pending = false
		g.settleLocked(c)
	}
}

// unauthenticated reports the connections not yet authenticated.
func (g *preauthGate) unauthenticated() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unauth
}

// gatedConn is an admitted connection. It leaves the unauthenticated count
// when its key is verified, when it closes, or when a newcomer takes its
// place (preauthGate.admit), whichever comes first, and the connection
// count when it closes or is taken.
type gatedConn struct {
	net.Conn
	gate   *preauthGate
	source sourceKey
	// admittedAt, pending (unauthenticated) and closed are guarded by
	// gate.mu, so that authentication, eviction and Close racing cannot
	// settle the connection twice.
	admittedAt      time.Time
	pending, closed bool
}

func (c *gatedConn) markAuthenticated() {
	c.gate.mu.Lock()
	defer c.gate.mu.Unlock()
	if c.pending && !c.closed {
		c.pending = false
		c.gate.settleLocked(c)
	}
}

func (c *gatedConn) authenticated() bool {
	c.gate.mu.Lock()
	defer c.gate.mu.Unlock()
	return !c.pending
}

func (c *gatedConn) Close() error {
	err := c.Conn.Close()
	c.gate.mu.Lock()
	defer c.gate.mu.Unlock()
	c.gate.closeLocked(c)
	return err
}

// gateListener admits or refuses each connection as it is accepted, so a
// refused one costs a file descriptor for a moment and nothing else, unless
// a lingering slot is free (refuseConn).
type gateListener struct {
	net.Listener
	gate  *preauthGate
	drops *ratelog.Log
	log   *slog.Logger // evictions, each one (the gate bounds them)
	// lingering holds a token per refused connection still draining.
	lingering chan struct{}
}

func newGateListener(ln net.Listener, gate *preauthGate, drops *ratelog.Log, log *slog.Logger) *gateListener {
	return &gateListener{Listener: ln, gate: gate, drops: drops, log: log, lingering: make(chan struct{}, refusalLingerMax)}
}

func (l *gateListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		gc := &gatedConn{Conn: withQuickAck(conn), gate: l.gate, source: l.gate.keyOf(sourceOf(conn.RemoteAddr()))}
		evicted, reason := l.gate.admit(gc)
		if reason != "" {
			l.refuseConn(conn, reason)
			l.drops.Note("connection refused before authentication",
				"remote", conn.RemoteAddr().String(), "local_source", gc.source.local, "reason", reason)
			continue
		}
		if evicted != nil {
			// Its server goroutine sees the socket closed and ends the
			// connection; the gate no longer counts it.
			evicted.conn.Conn.Close()
			l.log.Warn("unauthenticated connection evicted", "remote", evicted.conn.RemoteAddr().String(),
				"unauthenticated_for", evicted.age.Round(time.Millisecond).String(), "limit", evicted.reason,
				"for", conn.RemoteAddr().String(), "local_source", gc.source.local)
		}
		return gc, nil
	}
}

// sourceOf is the per-source key: the peer's IP address (IPv4-mapped IPv6
// as IPv4). Peers without an IP address share the zero key.
func sourceOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// RefusalPrefix starts the line a connection refused before authentication
// receives instead of the SSH version line. cmd/aptl-kali-capture/health.go
// accepts it as proof that the listener answers.
const RefusalPrefix = "aptl-kali-capture: refused before authentication: "

// Lingering bounds for refused connections: how many drain at once, for
// how long, and how much each may send.
const (
	refusalLingerMax   = 32
	refusalLingerTime  = 2 * time.Second
	refusalLingerBytes = 16 << 10
)

// refuseConn tells the client why, then closes. RFC 4253 (4.2) lets a server
// send lines before its version line; OpenSSH's client logs this one as it
// logs sshd's own "Exceeded MaxStartups" (ssh -v: "kex_exchange_identification:
// banner line 0: aptl-kali-capture: refused ..."). The write is a single
// non-blocking send on a socket that has sent nothing yet, so it cannot
// stall the accept loop.
//
// A client such as OpenSSH sends its version line without waiting for
// ours; closing a socket with unread bytes makes the kernel answer with a
// reset, which discards the line before the client reads it. So, while
// one of refusalLingerMax slots is free, the connection half-closes and
// reads what the client sends, bounded in time and bytes, until the client
// hangs up; with no slot free it is closed at once.
func (l *gateListener) refuseConn(conn net.Conn, reason string) {
	line := []byte(RefusalPrefix + reason + "\r\n")
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			raw.Write(func(fd uintptr) bool {
				syscall.Write(int(fd), line) // the fd is non-blocking (Go's poller)
				return true
			})
		}
	}
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		conn.Close()
		return
	}
	select {
	case l.lingering <- struct{}{}:
	default:
		conn.Close()
		return
	}
	go func() {
		defer func() { <-l.lingering }()
		defer tcp.Close()
		tcp.CloseWrite()
		tcp.SetReadDeadline(time.Now().Add(refusalLingerTime))
		io.Copy(io.Discard, io.LimitReader(tcp, refusalLingerBytes))
	}()
}

// newDropLog logs refusals before authentication: the first of each
// second with the address and reason, the rest as a count, so a flood does
// not become a log flood. Nothing the client sent is logged.
func newDropLog(log *slog.Logger) *ratelog.Log {
	return ratelog.New(log, slog.LevelWarn, "connection refusals before authentication not logged one by one", 1, time.Second)
}
