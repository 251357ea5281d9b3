// Command aptl-launch-agent runs in the workload container, as root there,
// and starts each recorded session's login shell on the PTY slave the
// aptl-kali-capture sidecar sends it; the sidecar keeps the master and the
// recording (docs/AGENT.md, "The agent adapter"). The wire protocol is
// internal/agentwire; the server is package agentd.
//
// It is built static (CGO_ENABLED=0) so that one binary runs in any workload
// image. It reads the workload's own /etc/passwd and /etc/group, never NSS.
// The slave it receives belongs to the sidecar's devpts, so in the workload
// `tty` prints "not a tty" while isatty, /dev/tty and job control work.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/agentd"
	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

// Exit codes; a usage error exits as aptl-kali-capture's do (cliconfig.ExitUsage).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = cliconfig.ExitUsage
)

// shutdownGrace is how long SIGTERM waits for sessions to be hung up and
// reported; it exceeds the launch package's SIGHUP→SIGKILL grace (2s).
const shutdownGrace = 5 * time.Second

func main() {
	// First: a process started as the login trampoline becomes a session's
	// shell here (launch/login/trampoline_linux.go) and never returns.
	login.TrampolineMain()
	if err := login.EnsureEmptySigmask(); err != nil {
		fmt.Fprintf(os.Stderr, "aptl-launch-agent: %v\n", err)
		os.Exit(exitFailure)
	}
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// config is the checked configuration. Every setting is a flag with an
// APTL_LAUNCH_AGENT_* environment equivalent; the flag wins (internal/cliconfig).
type config struct {
	socket                 string
	users                  []string
	allowRoot              bool
	insecureAllowSamePIDNS bool
	peerUID, peerGID       int
	maxSessions            int
	logFormat              string
	logLevel               slog.Level
}

// parseConfig reads the settings; -h prints the usage to help.
func parseConfig(args []string, lookup cliconfig.Lookup, help io.Writer) (*config, error) {
	e := cliconfig.New("aptl-launch-agent", lookup, help)
	e.SetHelpOutput(help)
	c := &config{}
	var users string
	var raw rawSettings
	e.String(&c.socket, "socket", "APTL_LAUNCH_AGENT_SOCKET", agentwire.DefaultSocket,
		"Unix socket to listen on: an absolute path (created 0600), or @name for an abstract socket in the network namespace")
	e.String(&users, "users", "APTL_LAUNCH_AGENT_USERS", "kali", "comma-separated login names sessions may run as")
	e.Bool(&c.allowRoot, "allow-root", "APTL_LAUNCH_AGENT_ALLOW_ROOT", "allow sessions as root (or any uid-0 account)")
	e.Bool(&c.insecureAllowSamePIDNS, "insecure-allow-same-pidns", "APTL_LAUNCH_AGENT_INSECURE_ALLOW_SAME_PIDNS",
		"development only: accept connections from processes in the agent's own PID namespace (any workload process)")
	e.String(&raw.peerUID, "peer-uid", "APTL_LAUNCH_AGENT_PEER_UID", "0",
		"uid the sidecar connects as (SO_PEERCRED); every other peer is refused")
	e.String(&raw.peerGID, "peer-gid", "APTL_LAUNCH_AGENT_PEER_GID", "0",
		"gid the sidecar connects as (SO_PEERCRED); every other peer is refused")
	e.String(&raw.maxSessions, "max-sessions", "APTL_LAUNCH_AGENT_MAX_SESSIONS", strconv.Itoa(agentd.DefaultMaxSessions), "concurrent sessions")
	logging := e.LoggingFlags("APTL_LAUNCH_AGENT_", "json")
	if err := e.Parse(args); err != nil {
		return nil, err
	}
	if err := agentwire.CheckSocket(c.socket); err != nil {
		return nil, e.SettingError("socket", "%v", err)
	}
	for _, u := range strings.Split(users, ",") {
		if u = strings.TrimSpace(u); u != "" {
			c.users = append(c.users, u)
		}
	}
	if err := c.setNumbers(e, raw); err != nil {
		return nil, err
	}
	if err := logging.Check(); err != nil {
		return nil, err
	}
	c.logFormat, c.logLevel = logging.Format(), logging.Level()
	return c, nil
}

// rawSettings are the numeric settings as given, before setNumbers checks them.
type rawSettings struct {
	peerUID, peerGID, maxSessions string
}

func (c *config) setNumbers(e *cliconfig.Flags, raw rawSettings) error {
	var err error
	if c.peerUID, err = parsePeerID(raw.peerUID); err != nil {
		return e.SettingError("peer-uid", "%v", err)
	}
	if c.peerGID, err = parsePeerID(raw.peerGID); err != nil {
		return e.SettingError("peer-gid", "%v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(raw.maxSessions))
	if err != nil || n < 1 || n > 10000 {
		return e.SettingError("max-sessions", "%q is not a number from 1 to 10000", raw.maxSessions)
	}
	c.maxSessions = n
	return nil
}

// maxPeerID is the largest uid or gid: (uid_t)-1 means no id.
const maxPeerID = 1<<32 - 2

// parsePeerID parses a numeric uid or gid; names would need the workload's
// passwd, where the sidecar's user does not exist.
func parsePeerID(s string) (int, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 || n > maxPeerID {
		return 0, fmt.Errorf("%q is not a number from 0 to %d", s, maxPeerID)
	}
	return int(n), nil
}

func run(args []string, lookup cliconfig.Lookup, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, lookup, stdout)
	if err != nil {
		return cliconfig.Fail(stderr, "aptl-launch-agent", err)
	}
	// Structured logs only: never argv, env values, commands or terminal bytes.
	log := cliconfig.NewLogger(stderr, cfg.logFormat, cfg.logLevel)
	// Before any session starts (login.KeepInheritedFDsFromSessions says why).
	if err := login.KeepInheritedFDsFromSessions(log); err != nil {
		log.Error("start failed", "err", err.Error())
		return exitFailure
	}
	srv, err := agentd.NewServer(agentd.Config{
		Users:                         cfg.users,
		AllowRoot:                     cfg.allowRoot,
		InsecureAllowSamePIDNamespace: cfg.insecureAllowSamePIDNS,
		PeerUID:                       cfg.peerUID,
		PeerGID:                       cfg.peerGID,
		MaxSessions:                   cfg.maxSessions,
		Logger:                        log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "aptl-launch-agent: %v\n", err)
		return exitUsage
	}
	ln, err := agentd.Listen(cfg.socket, cfg.peerUID, cfg.peerGID)
	if err != nil {
		log.Error("listen failed", "err", err.Error())
		return exitFailure
	}
	log.Info("listening", "socket", cfg.socket, "users", strings.Join(cfg.users, ","), "allow_root", cfg.allowRoot,
		"pid", os.Getpid(), "instance", srv.Instance().ID, "peer_uid", cfg.peerUID, "peer_gid", cfg.peerGID, "insecure_allow_same_pidns", cfg.insecureAllowSamePIDNS)
	if cfg.insecureAllowSamePIDNS {
		log.Warn("accepting peers in the agent's own PID namespace: any workload process can start sessions (development only)")
	}
	return serveUntilSignal(srv, ln, log)
}

func serveUntilSignal(srv *agentd.Server, ln *net.UnixListener, log *slog.Logger) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		log.Error("serve failed", "err", err.Error())
		return exitFailure
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Error("shutdown incomplete", "err", err.Error())
		return exitFailure
	}
	<-errc
	log.Info("stopped")
	return exitOK
}
