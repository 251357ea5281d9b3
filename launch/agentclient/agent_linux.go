// Package agentclient is the sidecar's side of the "agent" adapter: it sends
// each session's PTY slave (or pipe ends) to aptl-launch-agent in the
// workload over the protocol of internal/agentwire, and turns the agent's
// replies into a launch.Process. The workload's side is package agentd.
package agentclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

// Default bounds of the agent adapter's waits. Each is a failure deadline: a
// healthy agent answers in milliseconds.
const (
	DefaultAgentDialTimeout  = 5 * time.Second  // connect to the agent's socket
	DefaultAgentReplyTimeout = 10 * time.Second // agent's answer to spawn or probe
	agentWriteTimeout        = 5 * time.Second  // one request frame into the socket
	// exitReportSlack is how long after its SIGKILL (launch.HangupGrace after the
	// hang-up) the agent has to report the exit before the session counts as lost.
	exitReportSlack = 3 * time.Second
	// DefaultAgentWait is how long a session start that finds the agent
	// unreachable waits for it before refusing: the compose workload's
	// supervisor restarts a dead agent within about 2 s.
	DefaultAgentWait = 5 * time.Second
	// MaxAgentWait bounds the setting: the client waits that long for its
	// session (and its pre-auth slot is held meanwhile).
	MaxAgentWait = time.Minute
	// agentRetryInterval is the pause between connects while waiting.
	agentRetryInterval = 100 * time.Millisecond
)

var (
	// ErrAgentLost is wrapped by launch.Process.Wait when the agent vanished or broke
	// the protocol before reporting the exit: the broker's "launcher-lost".
	ErrAgentLost = errors.New("launch agent lost the session")
	// ErrAgentRefused is wrapped by Launch when the agent answered with an error.
	ErrAgentRefused = errors.New("launch agent refused the request")
	// ErrAgentUntrusted means the peer at the agent socket is not the agent
	// the sidecar expects: wrong uid, or inside the sidecar's PID namespace.
	ErrAgentUntrusted = errors.New("peer at the launch agent socket is not trusted")
)

// Agent is the "agent" adapter: session processes run in the workload,
// started by aptl-launch-agent, which receives only the PTY slave (or the three
// pipe ends) over a Unix socket; the master stays with the broker (docs/AGENT.md,
// "The agent adapter").
//
// A known consequence: the slave belongs to the sidecar's devpts instance, so
// inside the workload ttyname(3) fails (`tty` prints "not a tty" and there is
// no SSH_TTY), while isatty, /dev/tty, job control, sudo and getpass work.
type Agent struct {
	// Set by NewAgent and its options, then immutable.
	socket                    string
	dialTimeout, replyTimeout time.Duration
	// exitWait bounds Wait after a Hangup: launch.HangupGrace+exitReportSlack; tests shorten it.
	exitWait time.Duration
	// dial connects to the agent; tests replace it with one end of a socketpair.
	dial func(ctx context.Context) (*net.UnixConn, error)
	// agentUID is the uid the agent must run as; samePIDNS allows an agent
	// inside the sidecar's own PID namespace (development and tests only).
	agentUID  int
	samePIDNS bool
	// wait is how long Launch waits for an unreachable agent (0: not at all).
	wait time.Duration
	// reachability, if set, is told (it must not block) when a session start
	// found the agent unreachable and when one reached it after waiting:
	// readiness then probes at once instead of at its next tick.
	reachability func()
	log          *slog.Logger
	instances    instanceLog
}

var _ launch.Launcher = (*Agent)(nil)

// AgentOption configures an Agent.
type AgentOption func(*Agent) error

// WithDialTimeout bounds the connect to the agent's socket.
func WithDialTimeout(d time.Duration) AgentOption {
	return func(a *Agent) error {
		if d <= 0 {
			return errors.New("agentclient: agent dial timeout must be positive")
		}
		a.dialTimeout = d
		return nil
	}
}

// WithReplyTimeout bounds the wait for the agent's answer to a spawn or probe.
func WithReplyTimeout(d time.Duration) AgentOption {
	return func(a *Agent) error {
		if d <= 0 {
			return errors.New("agentclient: agent reply timeout must be positive")
		}
		a.replyTimeout = d
		return nil
	}
}

// WithAgentUID sets the uid the agent must run as (0 by default). Anyone can
// bind an abstract socket name, so the sidecar checks who answered.
func WithAgentUID(uid int) AgentOption {
	return func(a *Agent) error {
		if uid < 0 {
			return errors.New("agentclient: agent uid must not be negative")
		}
		a.agentUID = uid
		return nil
	}
}

// WithUnreachableWait sets how long a session start that finds the agent
// unreachable retries before refusing (DefaultAgentWait; 0 refuses at once).
func WithUnreachableWait(d time.Duration) AgentOption {
	return func(a *Agent) error {
		if d < 0 || d > MaxAgentWait {
			return fmt.Errorf("agentclient: agent wait %v is outside 0 to %v", d, MaxAgentWait)
		}
		a.wait = d
		return nil
	}
}

// WithReachabilityHook sets a function Launch calls, without waiting for
// it, when it found the agent unreachable and when it reached the agent
// after waiting.
func WithReachabilityHook(f func()) AgentOption {
	return func(a *Agent) error {
		a.reachability = f
		return nil
	}
}

// WithLogger sets where the adapter logs what it learns of the agent: each
// instance that answers (a start or restart of the agent) and the waits for
// an unreachable one. Without it nothing is logged.
func WithLogger(log *slog.Logger) AgentOption {
	return func(a *Agent) error {
		a.log = log
		return nil
	}
}

// InsecureAllowAgentInSamePIDNS accepts an agent inside the sidecar's own
// PID namespace, for development and tests. In a deployment the agent runs
// in the workload's PID namespace, where SO_PEERCRED reports pid 0.
func InsecureAllowAgentInSamePIDNS() AgentOption {
	return func(a *Agent) error {
		a.samePIDNS = true
		return nil
	}
}

// NewAgent returns the agent adapter for the agent listening on socket: a
// filesystem path, or "@name" for an abstract socket. It does not connect;
// Probe does.
func NewAgent(socket string, opts ...AgentOption) (*Agent, error) {
	if err := agentwire.CheckSocket(socket); err != nil {
		return nil, err
	}
	a := &Agent{socket: socket, dialTimeout: DefaultAgentDialTimeout, replyTimeout: DefaultAgentReplyTimeout,
		exitWait: launch.HangupGrace + exitReportSlack, wait: DefaultAgentWait, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if err := o(a); err != nil {
			return nil, err
		}
	}
	a.instances.log = a.log
	a.dial = func(ctx context.Context) (*net.UnixConn, error) {
		uc, err := dialAgentSocket(ctx, socket) // agentdial_linux.go: waits out a flood
		if err != nil {
			return nil, err
		}
		if err := a.checkPeer(uc); err != nil {
			uc.Close()
			return nil, err
		}
		return uc, nil
	}
	return a, nil
}

// Name implements Launcher.
func (a *Agent) Name() string { return "agent" }

// Socket returns the agent's address, for logs and readiness.
func (a *Agent) Socket() string { return a.socket }

// spawnRequest builds, without sending it, the request for spec and the fds
// that go with it (tests inspect both).
func spawnRequest(spec launch.Spec) (agentwire.SpawnMsg, []*os.File) {
	m := agentwire.SpawnMsg{User: spec.User, Term: spec.Term, Command: spec.Command, Env: spec.Env}
	if spec.TTY != nil {
		m.Mode = agentwire.SpawnPTY
		return m, []*os.File{spec.TTY}
	}
	m.Mode = agentwire.SpawnPipes
	return m, []*os.File{spec.Stdin, spec.Stdout, spec.Stderr}
}

// Launch implements Launcher: it sends the spawn request and the slave
// end(s), drops its own copies, and waits (bounded) for the agent's answer.
func (a *Agent) Launch(ctx context.Context, spec launch.Spec) (p launch.Process, err error) {
	// Ownership of the spec's fds transfers here. Once sendmsg returned, the
	// kernel holds the in-flight references; this process's copies are closed
	// on every path, so the sidecar keeps no reference to the slave.
	defer spec.CloseFiles()
	if err := spec.Check(); err != nil {
		return nil, err
	}
	msg, files := spawnRequest(spec)
	c, stop, err := a.connectWaiting(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		// Closing the connection is a hang-up for the agent: a session it
		// started for a Launch that then failed here is ended, not orphaned.
		if !stop() || err != nil {
			c.Close()
			p, err = nil, launchCtxErr(ctx, err)
		}
	}()
	if err := agentwire.WriteFrame(c, agentwire.MaxRequestFrame, time.Now().Add(agentWriteTimeout), agentwire.TypeSpawn, msg.Encode(), files...); err != nil {
		return nil, err
	}
	spec.CloseFiles()
	id, audit, err := a.readStarted(c, spec.User)
	if err != nil {
		return nil, err
	}
	// From here the waits last as long as the session; Hangup bounds the last one.
	if err := c.SetDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("agentclient: agent: %w", err)
	}
	return &agentProcess{id: id, audit: audit, c: c, exitWait: a.exitWait}, nil
}

// connect dials the agent within dialTimeout. stop detaches ctx from the
// connection and reports whether ctx had not yet expired.
func (a *Agent) connect(ctx context.Context) (c *net.UnixConn, stop func() bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("agentclient: %w", context.Cause(ctx))
	}
	dctx, cancel := context.WithTimeout(ctx, a.dialTimeout)
	defer cancel()
	c, err = a.dial(dctx)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, nil, fmt.Errorf("agentclient: %w", context.Cause(ctx))
	case errors.Is(err, ErrAgentUntrusted):
		return nil, nil, fmt.Errorf("agentclient: %w at %s", err, a.socket)
	default:
		return nil, nil, fmt.Errorf("agentclient: %w at %s: %v", launch.ErrAgentUnreachable, a.socket, err)
	}
	// Cancelling ctx interrupts any blocked read or write on c at once.
	stop = context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	return c, stop, nil
}

// connectWaiting is connect, retried every agentRetryInterval while the
// agent is unreachable, for up to a.wait after the first failure (each try
// bounded by the dial timeout): an agent that its supervisor is restarting
// answers within it, and the session starts instead of being refused. An
// untrusted peer is refused at once, not waited out.
func (a *Agent) connectWaiting(ctx context.Context) (*net.UnixConn, func() bool, error) {
	var first time.Time
	for {
		c, stop, err := a.connect(ctx)
		switch {
		case err == nil && !first.IsZero():
			a.log.Info("launch agent answered; the session starts", "waited", time.Since(first).Round(time.Millisecond).String())
			a.tellReachability()
			return c, stop, nil
		case err == nil || !errors.Is(err, launch.ErrAgentUnreachable) || a.wait == 0:
			return c, stop, err
		case first.IsZero():
			first = time.Now()
			a.log.Warn("launch agent unreachable; the session start waits for it", "wait", a.wait.String(), "err", err.Error())
			a.tellReachability()
		case time.Since(first) >= a.wait:
			return nil, nil, fmt.Errorf("%w (waited %v for the agent)", err, a.wait)
		}
		pause := time.NewTimer(min(agentRetryInterval, max(a.wait-time.Since(first), 0)))
		select {
		case <-ctx.Done():
			pause.Stop()
			return nil, nil, fmt.Errorf("agentclient: %w", context.Cause(ctx))
		case <-pause.C:
		}
	}
}

func (a *Agent) tellReachability() {
	if a.reachability != nil {
		a.reachability()
	}
}

func launchCtxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("agentclient: %w", context.Cause(ctx))
	}
	return err
}

// readStarted waits (bounded) for the answer to a spawn request.
func (a *Agent) readStarted(c *net.UnixConn, user string) (launch.Identity, auditSession, error) {
	if err := c.SetReadDeadline(time.Now().Add(a.replyTimeout)); err != nil {
		return launch.Identity{}, auditSession{}, fmt.Errorf("agentclient: agent: %w", err)
	}
	f, err := agentwire.ReadFrame(c, agentwire.MaxReplyFrame, agentwire.TypeStarted, agentwire.TypeError)
	if err != nil {
		return launch.Identity{}, auditSession{}, fmt.Errorf("agentclient: agent reply to spawn: %w", timeoutHint(err, a.replyTimeout))
	}
	if err := refuseFiles(&f); err != nil {
		return launch.Identity{}, auditSession{}, err
	}
	if f.Type == agentwire.TypeError {
		return launch.Identity{}, auditSession{}, replyError(f.Body)
	}
	m, err := agentwire.DecodeStarted(f.Body)
	if err != nil {
		return launch.Identity{}, auditSession{}, err
	}
	a.instances.note(m.Instance, "spawn")
	id, err := identityFromStarted(m, user)
	return id, auditFromStarted(m), err
}

// auditSession is what the agent reported of the session's kernel audit
// session: ses 0 means none, and note says why.
type auditSession struct {
	ses  uint32
	note string
}

// auditFromStarted takes the agent's word for the audit session id: the
// sidecar cannot read the workload's /proc. An id the kernel never gives
// (the unset value) counts as none.
func auditFromStarted(m agentwire.StartedMsg) auditSession {
	switch {
	case !m.AuditReported:
		return auditSession{note: "the launch agent is older than audit session reporting"}
	case m.AuditSes == 0:
		return auditSession{note: "launch agent: " + agentwire.Truncate(m.AuditNote, 512)}
	case m.AuditSes == login.AuditSessionUnset:
		return auditSession{note: "the launch agent reported the unset audit session id"}
	}
	return auditSession{ses: m.AuditSes}
}

// refuseFiles closes any fd the agent sent: nothing flows from the workload
// to the sidecar but bytes.
func refuseFiles(f *agentwire.Frame) error {
	if len(f.Files) == 0 {
		return nil
	}
	n := len(f.Files)
	f.CloseFiles()
	return agentwire.Protocolf("agent sent %d fds with a %s frame; closed them", n, f.Type)
}

// replyError turns an error reply into an error wrapping ErrAgentRefused.
// The agent's message is quoted: it is the workload's text.
func replyError(body []byte) error {
	m, err := agentwire.DecodeError(body)
	if err != nil {
		return err
	}
	return fmt.Errorf("agentclient: %w: %s: %q", ErrAgentRefused, agentwire.Truncate(m.Code, 64), agentwire.Truncate(m.Message, 512))
}

func timeoutHint(err error, d time.Duration) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("no answer within %v: %w", d, err)
	}
	return err
}

// identityFromStarted checks what the agent says it ran: the requested user,
// valid ids and an absolute shell.
func identityFromStarted(m agentwire.StartedMsg, user string) (launch.Identity, error) {
	switch {
	case m.User != user:
		return launch.Identity{}, agentwire.Protocolf("started frame names another user than the request")
	case uint64(m.UID) > login.MaxID || uint64(m.GID) > login.MaxID:
		return launch.Identity{}, agentwire.Protocolf("started frame: uid or gid out of range")
	case !filepath.IsAbs(m.Shell):
		return launch.Identity{}, agentwire.Protocolf("started frame: shell is not an absolute path")
	}
	return launch.Identity{User: m.User, UID: int(m.UID), GID: int(m.GID), Home: m.Home, Shell: m.Shell, Note: m.Note,
		Source: launch.IdentityReported}, nil
}

// Probe connects to the agent and asks it to answer without starting
// anything. It is for readiness: nil means a session could be launched now.
func (a *Agent) Probe(ctx context.Context) (err error) {
	c, stop, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	defer func() {
		if !stop() {
			err = launchCtxErr(ctx, err)
		}
	}()
	if err := agentwire.WriteFrame(c, agentwire.MaxRequestFrame, time.Now().Add(agentWriteTimeout), agentwire.TypeProbe, nil); err != nil {
		return fmt.Errorf("agentclient: %w: %v", launch.ErrAgentUnreachable, err)
	}
	if err := c.SetReadDeadline(time.Now().Add(a.replyTimeout)); err != nil {
		return err
	}
	f, err := agentwire.ReadFrame(c, agentwire.MaxReplyFrame, agentwire.TypeProbeOK, agentwire.TypeError)
	if err != nil {
		return fmt.Errorf("agentclient: %w: probe: %v", launch.ErrAgentUnreachable, timeoutHint(err, a.replyTimeout))
	}
	if err := refuseFiles(&f); err != nil {
		return err
	}
	if f.Type == agentwire.TypeError {
		return replyError(f.Body)
	}
	in, err := agentwire.DecodeProbeOK(f.Body)
	if err != nil {
		return err
	}
	a.instances.note(in, "probe")
	return nil
}

// agentProcess is a session process the agent started in the workload.
//
// Lifecycle: Launch returns it with no deadlines on c → Signal writes signal
// frames → Hangup shuts down c's write side (the agent hangs the group up) and
// sets a read deadline → Wait reads the exit frame (or loses the agent), sets
// done and closes c.
type agentProcess struct {
	id       launch.Identity // immutable
	audit    auditSession    // immutable; as the agent reported it
	c        *net.UnixConn   // read only by Wait; written by Signal; shut down by Hangup
	exitWait time.Duration   // immutable; how long Wait waits after Hangup

	done       atomic.Bool // set by Wait once it returns
	hungUp     atomic.Bool // set by Hangup before it shortens Wait's read deadline
	hangupOnce sync.Once
}

var _ launch.Process = (*agentProcess)(nil)

// Identity implements launch.Process.
func (p *agentProcess) Identity() launch.Identity { return p.id }

// AuditSession implements launch.Process: the kernel audit session id the
// agent reported for the session (its word; the audit records are the
// kernel's).
func (p *agentProcess) AuditSession() (uint32, bool) { return p.audit.ses, p.audit.ses != 0 }

// AuditSessionNote implements launch.AuditNoter.
func (p *agentProcess) AuditSessionNote() string { return p.audit.note }

// Wait implements launch.Process. It returns an error wrapping ErrAgentLost if the
// agent closed the connection, broke the protocol, reported an error, or
// did not report the exit within exitWait of a Hangup.
func (p *agentProcess) Wait() (launch.Exit, error) {
	defer p.c.Close()
	defer p.done.Store(true)
	f, err := agentwire.ReadFrame(p.c, agentwire.MaxReplyFrame, agentwire.TypeExit, agentwire.TypeError)
	switch {
	case err != nil && p.hungUp.Load() && errors.Is(err, os.ErrDeadlineExceeded):
		return launch.Exit{}, fmt.Errorf("agentclient: %w: no exit status within %v of the hang-up", ErrAgentLost, p.exitWait)
	case errors.Is(err, agentwire.ErrPeerClosed):
		return launch.Exit{}, fmt.Errorf("agentclient: %w: the agent closed the connection without an exit status", ErrAgentLost)
	case err != nil:
		return launch.Exit{}, fmt.Errorf("agentclient: %w: %w", ErrAgentLost, err)
	}
	if err := refuseFiles(&f); err != nil {
		return launch.Exit{}, fmt.Errorf("agentclient: %w: %w", ErrAgentLost, err)
	}
	if f.Type == agentwire.TypeError {
		return launch.Exit{}, fmt.Errorf("agentclient: %w: %w", ErrAgentLost, replyError(f.Body))
	}
	m, err := agentwire.DecodeExit(f.Body)
	if err == nil {
		err = checkExit(m)
	}
	if err != nil {
		return launch.Exit{}, fmt.Errorf("agentclient: %w: %w", ErrAgentLost, err)
	}
	return launch.Exit{Code: int(m.Code), Signal: syscall.Signal(m.Signal), CoreDumped: m.Core == 1}, nil
}

// checkExit accepts what wait(2) can report: a code 0-255, or a signal 1-64.
func checkExit(m agentwire.ExitMsg) error {
	switch {
	case m.Core > 1:
		return agentwire.Protocolf("exit frame: core flag %d", m.Core)
	case m.Signal == 0 && m.Code <= 255 && m.Core == 0:
		return nil
	case m.Signal > 0 && m.Signal <= launch.MaxSignal && m.Code == 0:
		return nil
	}
	return agentwire.Protocolf("exit frame: code %d with signal %d is not a wait status", m.Code, m.Signal)
}

// Signal implements launch.Process: the agent sends sig to the session's process group.
func (p *agentProcess) Signal(sig syscall.Signal) error {
	if p.done.Load() {
		return fmt.Errorf("agentclient: signal: %w", os.ErrProcessDone)
	}
	name := launch.Exit{Signal: sig}.SignalName()
	if name == "" {
		return fmt.Errorf("agentclient: signal %d has no RFC 4254 name", int(sig))
	}
	return agentwire.WriteFrame(p.c, agentwire.MaxRequestFrame, time.Now().Add(agentWriteTimeout), agentwire.TypeSignal, agentwire.EncodeSignal(name))
}

// Hangup implements launch.Process. It shuts down the connection's write side,
// which the agent treats as the hang-up (SIGHUP, then SIGKILL after
// hangupGrace), and bounds Wait. Only the first call has an effect; it never blocks.
func (p *agentProcess) Hangup() {
	p.hangupOnce.Do(func() {
		p.hungUp.Store(true)
		// After Wait closed c these fail harmlessly.
		_ = p.c.CloseWrite()
		_ = p.c.SetReadDeadline(time.Now().Add(p.exitWait))
	})
}
