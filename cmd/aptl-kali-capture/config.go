//go:build linux

package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
	"github.com/aptl/aptl-kali-capture/internal/diskstate"
	"github.com/aptl/aptl-kali-capture/internal/peercred"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/launch/agentclient"
	"github.com/aptl/aptl-kali-capture/launch/login"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/ship"
	"github.com/aptl/aptl-kali-capture/witness/audit"
	"github.com/aptl/aptl-kali-capture/witness/auditrelay"
	"github.com/aptl/aptl-kali-capture/witness/pcap"
)

// Every setting is a flag with an APTL_CAPTURE_* environment equivalent
// (internal/cliconfig, shared with aptl-launch-agent). The environment
// supplies the default, the flag overrides it, and every value is checked
// before the server starts, with an error that names both spellings of the
// setting.

// serveConfig is the checked configuration of the serve subcommand.
type serveConfig struct {
	listen         string
	root           string
	stateDir       string
	authorizedKeys string // "" means the newcomer default under stateDir
	sessionKeys    string // sessionKeysHost, sessionKeysPool or sessionKeysPoolOrHost
	ship           shipSettings
	shipOn         bool        // a bucket is set: sessions are shipped
	shipConfig     ship.Config // checked, when shipOn
	users          []string
	launch         string
	acceptEnv      []string
	logFormat      string
	logLevel       slog.Level
	shutdownGrace  time.Duration
	portTakenWait  time.Duration // how long serve retries a taken SSH port before exitPortTaken
	limits         broker.Limits
	sync           recorder.SyncMode
	maxTranscript  int64 // bytes; 0: no cap
	agentSocket    string
	agentDial      time.Duration
	agentReply     time.Duration
	agentProbe     time.Duration
	// agentWait: how long a session start waits for an unreachable agent.
	agentWait time.Duration
	agentUID  int
	// insecureAgentSamePIDNS accepts an agent in the sidecar's own PID
	// namespace: development and tests only.
	insecureAgentSamePIDNS bool
	readyFile              string
	// pcap is whether the pcap class is selected (--classes); pcapLimits
	// its rotation (--pcap-rotate-mb, --pcap-files); pcapHostNetns lets it
	// capture in the host's initial network namespace too
	// (--pcap-host-netns, witness/pcap/hostnetns_linux.go).
	pcap          bool
	pcapLimits    pcap.Limits
	pcapHostNetns bool
	// auditRules is the lab's audit rules file, parsed (--audit-rules),
	// nil unless the audit class is selected; auditLimits the rotation of
	// the audit files (--audit-rotate-mb, --audit-files).
	auditRules  *audit.RuleSet
	auditLimits audit.Limits
	// auditRelay is the witness relay the engine reaches the kernel's
	// audit through (--audit-relay), nil: the kernel's netlink directly.
	auditRelay *auditrelay.Peer
	// algorithms are the effective transport lists (--kex, --ciphers, --macs).
	algorithms broker.Algorithms
	// ptyEOF (--pty-eof) is what a client's EOF on a PTY session does;
	// ptyEOFWait (--pty-eof-wait) bounds eof's wait for the session's end.
	ptyEOF     broker.PTYEOF
	ptyEOFWait time.Duration
	// clientAlive (--client-alive-interval, --client-alive-count-max)
	// probes silent connections and closes half-open ones.
	clientAlive broker.ClientAlive
	// disk are the capture volume's marks (diskconfig.go).
	disk diskstate.Thresholds
	// budgetPercent and runBudgetPercent are the witnesses' budgets.
	budgetPercent, runBudgetPercent int
	// checkOnly (--check) validates and prints the settings instead of serving.
	checkOnly bool
	// settings are every flag's effective value, for --check.
	settings []setting
	// unknownEnv are APTL_CAPTURE_* names no setting reads (misspelt).
	unknownEnv []string
}

func parseServeConfig(args []string, lookup cliconfig.Lookup) (*serveConfig, error) {
	c := &serveConfig{}
	lim := broker.DefaultLimits()
	e := cliconfig.New(progName+" serve", lookup, os.Stderr)
	var users, acceptEnv string
	e.String(&c.listen, "listen", "APTL_CAPTURE_LISTEN", defaultListen, "host:port of the SSH server")
	e.String(&c.root, "root", "APTL_CAPTURE_ROOT", defaultRoot, "capture root: <root>/<run>/<session>/pty/...")
	e.String(&c.stateDir, "state-dir", "APTL_CAPTURE_STATE_DIR", defaultStateDir, "private state: host key, and the newcomer client key")
	e.String(&c.sessionKeys, "session-keys", "APTL_CAPTURE_SESSION_KEYS", sessionKeysHost, "what signs each session's record: host-key (the host key), pool (a one-time key of its own from <state-dir>/session-keys/pool/, made with keys provision; no key left refuses the session) or pool-or-host-key (the host key where none is left, said in the open record)")
	bindShipFlags(e, &c.ship)
	e.Duration(&c.ship.cfg.Retention, "ship-retention", "APTL_CAPTURE_SHIP_RETENTION", 0, "Object Lock: every object shipped is locked in COMPLIANCE mode this long from its upload, at least 24h (0: no lock; the bucket must have Object Lock enabled)")
	e.Int(&c.ship.cfg.Workers, "ship-workers", "APTL_CAPTURE_SHIP_WORKERS", ship.DefaultWorkers, "uploads at once")
	e.String(&c.authorizedKeys, "authorized-keys", "APTL_CAPTURE_AUTHORIZED_KEYS", "", "OpenSSH authorized_keys file (default: <state-dir>/authorized_keys, created with a new client key if absent)")
	e.String(&users, "users", "APTL_CAPTURE_USERS", currentUserName(), "comma-separated SSH login names allowed")
	e.String(&c.launch, "launch", "APTL_CAPTURE_LAUNCH", "local", "launch adapter: local (shell in the sidecar) or agent (shell in the workload via aptl-launch-agent)")
	e.String(&c.agentSocket, "agent-socket", "APTL_CAPTURE_AGENT_SOCKET", agentwire.DefaultSocket, "the agent's Unix socket: an absolute path, or @name for an abstract socket in the shared network namespace")
	e.Duration(&c.agentDial, "agent-dial-timeout", "APTL_CAPTURE_AGENT_DIAL_TIMEOUT", agentclient.DefaultAgentDialTimeout, "time to connect to the agent")
	e.Duration(&c.agentReply, "agent-reply-timeout", "APTL_CAPTURE_AGENT_REPLY_TIMEOUT", agentclient.DefaultAgentReplyTimeout, "time the agent has to answer a request")
	e.Duration(&c.agentProbe, "agent-probe-interval", "APTL_CAPTURE_AGENT_PROBE_INTERVAL", 5*time.Second, "how often readiness probes the agent")
	e.Duration(&c.agentWait, "agent-wait", "APTL_CAPTURE_AGENT_WAIT", agentclient.DefaultAgentWait,
		"how long a session start that finds the agent unreachable waits for it before refusing (0: refuse at once)")
	e.Int(&c.agentUID, "agent-uid", "APTL_CAPTURE_AGENT_UID", 0, "uid the launch agent must run as (checked with SO_PEERCRED: anyone can bind an abstract socket name)")
	e.Bool(&c.insecureAgentSamePIDNS, "insecure-agent-same-pidns", "APTL_CAPTURE_INSECURE_AGENT_SAME_PIDNS", "development only: accept a launch agent in the sidecar's own PID namespace")
	e.String(&c.readyFile, "ready-file", "APTL_CAPTURE_READY_FILE", "", "readiness file (key=value lines) that the health subcommand reads (default: <state-dir>/ready)")
	e.String(&acceptEnv, "accept-env", "APTL_CAPTURE_ACCEPT_ENV", strings.Join(broker.DefaultAcceptEnv, ","), "env names (or PREFIX*) passed to the session besides APTL_SESSION_ID, APTL_RUN_ID, APTL_TRACE_ID")
	logging := e.LoggingFlags("APTL_CAPTURE_", "text")
	e.Duration(&c.shutdownGrace, "shutdown-grace", "APTL_CAPTURE_SHUTDOWN_GRACE", 10*time.Second, "time SIGTERM allows sessions to finalize")
	e.Duration(&c.portTakenWait, "port-taken-wait", "APTL_CAPTURE_PORT_TAKEN_WAIT", 30*time.Second, "how long to retry a listen address another process holds (readiness listen=taken) before exiting with status 4")
	e.Int(&lim.MaxAuthTries, "max-auth-tries", "APTL_CAPTURE_MAX_AUTH_TRIES", lim.MaxAuthTries, "authentication attempts per connection")
	e.Duration(&lim.LoginGrace, "login-grace", "APTL_CAPTURE_LOGIN_GRACE", lim.LoginGrace, "time allowed from connect to authenticated")
	e.Int(&lim.MaxConns, "max-conns", "APTL_CAPTURE_MAX_CONNS", lim.MaxConns, "open connections")
	e.Int(&lim.MaxSessions, "max-sessions", "APTL_CAPTURE_MAX_SESSIONS", lim.MaxSessions, "open sessions, all connections")
	e.Int(&lim.MaxSessionsPerConn, "max-sessions-per-conn", "APTL_CAPTURE_MAX_SESSIONS_PER_CONN", lim.MaxSessionsPerConn, "open sessions on one connection")
	e.Int(&lim.MaxEnvRequests, "max-env", "APTL_CAPTURE_MAX_ENV_REQUESTS", lim.MaxEnvRequests, "env requests per session")
	applyPreauth := bindPreauthFlags(e, &lim)
	var syncMode string
	var maxMB int
	e.String(&syncMode, "sync", "APTL_CAPTURE_SYNC", "interval", "record durability: interval (fsync within 1 s or 1 MiB) or strict (fsync each chunk before the client gets it)")
	e.Int(&maxMB, "max-transcript-mb", "APTL_CAPTURE_MAX_TRANSCRIPT_MB", 0, "bytes a typescript stores, in MiB (0: no cap); later data is digested and counted, not stored")
	applyClasses := bindClassFlags(e, c)
	applyDisk := bindDiskFlags(e, &c.disk)
	applyBudget := bindBudgetFlags(e, &c.budgetPercent, &c.runBudgetPercent)
	// --pty-eof: eof (the terminal's EOF character, serving both OpenSSH's
	// piped stdin and node ssh2's shell.end()), ignore (OpenSSH's sshd) or
	// hangup (shell.end() finalizes the record at once; typed-ahead
	// commands are lost). broker/ptyeof_linux.go says why eof waits.
	var ptyEOF string
	e.String(&ptyEOF, "pty-eof", "APTL_CAPTURE_PTY_EOF", broker.PTYEOFChar.String(), "what a client's EOF on a PTY shell does: eof (type the terminal's EOF character once the shell has read what was sent; hang up after --pty-eof-wait), ignore (as sshd) or hangup (hang the shell up at once, close reason client-eof)")
	e.Duration(&c.ptyEOFWait, "pty-eof-wait", "APTL_CAPTURE_PTY_EOF_WAIT", broker.DefaultPTYEOFWait, "with --pty-eof eof: time a PTY shell has to end after the client's EOF before it is hung up (close reason client-eof-timeout); 100ms to 1m")
	// OpenSSH's ClientAliveInterval and ClientAliveCountMax (broker/keepalive.go).
	e.Duration(&c.clientAlive.Interval, "client-alive-interval", "APTL_CAPTURE_CLIENT_ALIVE_INTERVAL", 15*time.Second, "time a connection may stay silent before a keepalive@openssh.com probe (0: never probe)")
	e.Int(&c.clientAlive.CountMax, "client-alive-count-max", "APTL_CAPTURE_CLIENT_ALIVE_COUNT_MAX", 3, "silent intervals in a row after which the connection is closed (its sessions close as client-closed)")
	// Transport algorithms, in OpenSSH's list syntax (broker.ApplyAlgorithmSpec).
	algSpecs := algorithmFlags(e)
	e.FlagSet.BoolVar(&c.checkOnly, "check", false, "check the settings, print the effective ones (name value per line) and exit")
	if err := e.Parse(args); err != nil {
		return nil, err
	}
	if err := logging.Check(); err != nil {
		return nil, err
	}
	c.logFormat, c.logLevel = logging.Format(), logging.Level()
	algs, err := resolveAlgorithms(e, algSpecs)
	if err != nil {
		return nil, err
	}
	c.algorithms = algs
	if err := applyPreauth(); err != nil {
		return nil, err
	}
	if err := applyClasses(); err != nil {
		return nil, err
	}
	if err := applyDisk(); err != nil {
		return nil, err
	}
	if err := applyBudget(); err != nil {
		return nil, err
	}
	switch syncMode {
	case "interval":
		c.sync = recorder.SyncInterval
	case "strict":
		c.sync = recorder.SyncStrict
	default:
		return nil, e.SettingError("sync", "%q is neither interval nor strict", syncMode)
	}
	if c.ptyEOF, err = broker.ParsePTYEOF(ptyEOF); err != nil {
		return nil, e.SettingError("pty-eof", "%v", err)
	}
	// Below 100 ms a shell at its prompt may not have read the EOF
	// character yet; past a minute the tool servers' client long gave up.
	if err := cliconfig.CheckRange(e, "pty-eof-wait", c.ptyEOFWait, 100*time.Millisecond, time.Minute); err != nil {
		return nil, err
	}
	if err := cliconfig.CheckRange(e, "max-transcript-mb", maxMB, 0, 1<<20); err != nil {
		return nil, err
	}
	c.maxTranscript = int64(maxMB) << 20
	c.users = splitList(users)
	c.acceptEnv = splitList(acceptEnv)
	c.limits = lim
	if err := c.check(e); err != nil {
		return nil, err
	}
	c.settings = effectiveSettings(e, c)
	c.unknownEnv = unknownCaptureEnv(e.FlagSet, os.Environ())
	return c, nil
}

func (c *serveConfig) check(e *cliconfig.Flags) error {
	if err := checkListen(c.listen); err != nil {
		return e.SettingError("listen", "%v", err)
	}
	if c.root == "" {
		return e.SettingError("root", "must not be empty")
	}
	if c.stateDir == "" {
		return e.SettingError("state-dir", "must not be empty")
	}
	if c.ship.cfg.Bucket != "" {
		cfg, err := c.ship.config(e)
		if err != nil {
			return err
		}
		c.shipOn, c.shipConfig = true, cfg
	}
	switch c.sessionKeys {
	case sessionKeysHost, sessionKeysPool, sessionKeysPoolOrHost:
	default:
		return e.SettingError("session-keys", "%q is none of %s, %s, %s", c.sessionKeys, sessionKeysHost, sessionKeysPool, sessionKeysPoolOrHost)
	}
	if len(c.users) == 0 {
		return e.SettingError("users", "name at least one login user")
	}
	for _, u := range c.users {
		if !login.ValidLoginName(u) {
			return e.SettingError("users", "%q is not a valid login name", u)
		}
	}
	switch c.launch {
	case "local":
	case "agent":
		if err := agentwire.CheckSocket(c.agentSocket); err != nil {
			return e.SettingError("agent-socket", "%v", err)
		}
	default:
		return e.SettingError("launch", "unknown adapter %q (want local or agent)", c.launch)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"agent-dial-timeout", c.agentDial}, {"agent-reply-timeout", c.agentReply}, {"agent-probe-interval", c.agentProbe}} {
		if err := cliconfig.CheckRange(e, d.name, d.v, time.Millisecond, time.Minute); err != nil {
			return err
		}
	}
	if err := cliconfig.CheckRange(e, "agent-wait", c.agentWait, 0, agentclient.MaxAgentWait); err != nil {
		return err
	}
	// (uid_t)-1 means no uid.
	if err := cliconfig.CheckRange(e, "agent-uid", int64(c.agentUID), 0, 1<<32-2); err != nil {
		return err
	}
	if !filepath.IsAbs(c.readyFile) && strings.HasPrefix(c.readyFile, "-") {
		return e.SettingError("ready-file", "must be a path")
	}
	for _, p := range c.acceptEnv {
		if !broker.ValidEnvPattern(p) {
			return e.SettingError("accept-env", "%q is not an environment name or NAME* prefix", p)
		}
		// The agent refuses every session that carries such a name: say so now.
		if c.launch == "agent" && !agentwire.EnvPatternAllowed(p) {
			return e.SettingError("accept-env", "%q names env the launch agent refuses; with --launch agent only %s may be passed", p, agentwire.EnvSet())
		}
	}
	if err := cliconfig.CheckRange(e, "shutdown-grace", c.shutdownGrace, time.Millisecond, time.Hour); err != nil {
		return err
	}
	if err := cliconfig.CheckRange(e, "port-taken-wait", c.portTakenWait, 0, time.Hour); err != nil {
		return err
	}
	if d := c.clientAlive.Interval; d != 0 && (d < time.Second || d > time.Hour) {
		return e.SettingError("client-alive-interval", "%v: must be 0 (off) or between 1s and 1h0m0s", d)
	}
	if err := cliconfig.CheckRange(e, "client-alive-count-max", c.clientAlive.CountMax, 1, 100); err != nil {
		return err
	}
	return checkLimits(e, c.limits)
}

func checkLimits(e *cliconfig.Flags, l broker.Limits) error {
	for _, v := range []struct {
		name        string
		v, min, max int
	}{
		{"max-auth-tries", l.MaxAuthTries, 1, 100},
		{"max-conns", l.MaxConns, 1, 10000},
		{"max-sessions", l.MaxSessions, 1, 10000},
		{"max-sessions-per-conn", l.MaxSessionsPerConn, 1, 1000},
		{"max-env", l.MaxEnvRequests, 1, 1000},
	} {
		if err := cliconfig.CheckRange(e, v.name, v.v, v.min, v.max); err != nil {
			return err
		}
	}
	if err := cliconfig.CheckRange(e, "login-grace", l.LoginGrace, time.Millisecond, 10*time.Minute); err != nil {
		return err
	}
	return checkPreauthLimits(e, l)
}

// Pre-authentication limits (broker/preauth.go): --max-startups in
// OpenSSH's start:rate:full, --per-source-max-startups, --preauth-evict-after,
// and --login-grace above. --max-conns still bounds authenticated and unauthenticated
// connections together; max-startups' full must stay below it.

// bindPreauthFlags defines the pre-authentication flags; the function it
// returns stores their parsed values in lim once the flags are parsed.
func bindPreauthFlags(e *cliconfig.Flags, lim *broker.Limits) func() error {
	var startups string
	e.String(&startups, "max-startups", "APTL_CAPTURE_MAX_STARTUPS", lim.MaxStartups.String(),
		"unauthenticated connections, OpenSSH start:rate:full: from start on refuse rate% of new ones, rising to all at full")
	e.Int(&lim.PerSourceMaxStartups, "per-source-max-startups", "APTL_CAPTURE_PER_SOURCE_MAX_STARTUPS", lim.PerSourceMaxStartups,
		"unauthenticated connections from one source address")
	e.Duration(&lim.PreauthEvictAfter, "preauth-evict-after", "APTL_CAPTURE_PREAUTH_EVICT_AFTER", lim.PreauthEvictAfter,
		"where a limit is reached, a new connection takes the place of one unauthenticated for this long (at most --login-grace)")
	return func() error {
		m, err := broker.ParseMaxStartups(startups)
		if err != nil {
			return e.SettingError("max-startups", "%v", err)
		}
		lim.MaxStartups = m
		return nil
	}
}

func checkPreauthLimits(e *cliconfig.Flags, l broker.Limits) error {
	switch {
	case l.MaxStartups.Full > 10000:
		return e.SettingError("max-startups", "full %d: must be between 1 and 10000", l.MaxStartups.Full)
	case l.MaxStartups.Full >= l.MaxConns:
		return e.SettingError("max-startups", "full (%d) must be below --max-conns (%d), or unauthenticated connections could take every slot", l.MaxStartups.Full, l.MaxConns)
	case l.PerSourceMaxStartups <= 0 || l.PerSourceMaxStartups > l.MaxStartups.Full:
		return e.SettingError("per-source-max-startups", "must be from 1 to --max-startups' full (%d)", l.MaxStartups.Full)
	case l.PreauthEvictAfter < time.Millisecond || l.PreauthEvictAfter > l.LoginGrace:
		return e.SettingError("preauth-evict-after", "%v: must be from 1ms to --login-grace (%v)", l.PreauthEvictAfter, l.LoginGrace)
	}
	return nil
}

func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if host != "" && net.ParseIP(host) == nil && !validHostName(host) {
		return fmt.Errorf("%q is not an IP address or host name", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// validHostName reports whether h is a DNS name (RFC 1123 labels).
func validHostName(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return false
			}
		}
	}
	return true
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func currentUserName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}

// bindClassFlags defines what is recorded (--classes), the pcap files'
// rotation and the audit witness's rules and rotation; the function it
// returns checks them and stores them in c.
func bindClassFlags(e *cliconfig.Flags, c *serveConfig) func() error {
	var classes, auditRules, relaySocket string
	var rotateMB, auditMB, relayUID, relayGID int
	e.String(&classes, "classes", "APTL_CAPTURE_CLASSES", vocab.ClassPTY+","+vocab.ClassPcap, "what is recorded: pty (always), pcap (the session's packets, in <session>/pcap/) and audit (the session's kernel audit records, in <session>/audit/; needs --audit-rules)")
	e.Int(&rotateMB, "pcap-rotate-mb", "APTL_CAPTURE_PCAP_ROTATE_MB", pcap.DefaultRotateMB, "size of one pcap file, in MiB, before the next one starts")
	e.Int(&c.pcapLimits.Files, "pcap-files", "APTL_CAPTURE_PCAP_FILES", pcap.DefaultFiles, "pcap files a session keeps; past them packets are counted in a gap record, not stored")
	e.Bool(&c.pcapHostNetns, "pcap-host-netns", "APTL_CAPTURE_PCAP_HOST_NETNS", "capture packets in the host's initial network namespace too, where they are every process's on the host (by default pcap captures only in a network namespace of serve's own, a lab's)")
	e.String(&auditRules, "audit-rules", "APTL_CAPTURE_AUDIT_RULES", "", "the lab's audit rules file (auditctl syntax, the subset in docs/WITNESSES.md), for the audit class")
	e.Int(&auditMB, "audit-rotate-mb", "APTL_CAPTURE_AUDIT_ROTATE_MB", audit.DefaultRotateMB, "size of one audit file (a session's, and _audit/audit.log), in MiB, before the next one starts")
	e.Int(&c.auditLimits.Files, "audit-files", "APTL_CAPTURE_AUDIT_FILES", audit.DefaultFiles, "audit files a session keeps (past them events are counted in a gap record), and rotated _audit/audit.log files kept")
	e.String(&relaySocket, "audit-relay", "APTL_CAPTURE_AUDIT_RELAY", "", "the witness relay's socket (aptl-kali-capture witness-relay), through which the audit witness reaches the kernel where serve cannot itself, as in the Compose pair; empty: the kernel's audit netlink directly")
	e.Int(&relayUID, "audit-relay-uid", "APTL_CAPTURE_AUDIT_RELAY_UID", 0, "uid the witness relay runs as (checked with SO_PEERCRED)")
	e.Int(&relayGID, "audit-relay-gid", "APTL_CAPTURE_AUDIT_RELAY_GID", defaultRelayGID, "gid the witness relay runs as (checked with SO_PEERCRED)")
	return func() error {
		seen := map[string]bool{}
		for _, cl := range splitList(classes) {
			if cl != vocab.ClassPTY && cl != vocab.ClassPcap && cl != vocab.ClassAudit {
				return e.SettingError("classes", "unknown class %q (want pty and optionally pcap and audit)", cl)
			}
			seen[cl] = true
		}
		if !seen[vocab.ClassPTY] {
			return e.SettingError("classes", "must include pty: the terminal is always recorded")
		}
		c.pcap = seen[vocab.ClassPcap]
		if err := cliconfig.CheckRange(e, "pcap-rotate-mb", rotateMB, 1, 1<<20); err != nil {
			return err
		}
		c.pcapLimits.RotateBytes = int64(rotateMB) << 20
		if err := cliconfig.CheckRange(e, "pcap-files", c.pcapLimits.Files, 1, 100000); err != nil {
			return err
		}
		if err := applyAuditFlags(e, c, seen[vocab.ClassAudit], auditRules, auditMB); err != nil {
			return err
		}
		return applyRelayFlags(e, c, relaySocket, relayUID, relayGID)
	}
}

// defaultRelayGID is the witness relay's group in the Compose pair: its
// own, as 10001 is the sidecar's (compose/docker-compose.yml).
const defaultRelayGID = 10002

// applyRelayFlags checks the witness relay's settings.
func applyRelayFlags(e *cliconfig.Flags, c *serveConfig, socket string, uid, gid int) error {
	if socket == "" {
		return nil
	}
	if c.auditRules == nil {
		return e.SettingError("audit-relay", "is set, but the audit class is not selected (--classes)")
	}
	if !filepath.IsAbs(socket) {
		return e.SettingError("audit-relay", "must be an absolute path, not %q", socket)
	}
	if err := peercred.CheckIDs(uid, gid); err != nil {
		return e.SettingError("audit-relay-uid", "the witness relay's %v", err)
	}
	c.auditRelay = &auditrelay.Peer{Socket: socket, UID: uid, GID: gid}
	return nil
}

// applyAuditFlags checks the audit settings and reads the rules file, so
// a rule the witness does not support stops the server at start with its
// file and line.
func applyAuditFlags(e *cliconfig.Flags, c *serveConfig, selected bool, rules string, rotateMB int) error {
	switch {
	case selected && rules == "":
		return e.SettingError("audit-rules", "the audit class needs a rules file")
	case !selected && rules != "":
		return e.SettingError("audit-rules", "is set, but the audit class is not selected (--classes)")
	case !selected:
		return nil
	}
	if err := cliconfig.CheckRange(e, "audit-rotate-mb", rotateMB, 1, 1<<20); err != nil {
		return err
	}
	c.auditLimits.RotateBytes = int64(rotateMB) << 20
	if err := cliconfig.CheckRange(e, "audit-files", c.auditLimits.Files, 1, 100000); err != nil {
		return err
	}
	rs, err := audit.ParseRulesFile(rules)
	if err != nil {
		return e.SettingError("audit-rules", "%v", err)
	}
	c.auditRules = rs
	return nil
}
