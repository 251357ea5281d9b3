//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/aptl/aptl-kali-capture/internal/auditnetlink"
	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
	"github.com/aptl/aptl-kali-capture/internal/peercred"
	"github.com/aptl/aptl-kali-capture/witness/auditrelay"
)

func init() {
	register("witness-relay", command{summary: "serve the kernel's audit to the sidecar's audit witness, from the host's PID and network namespaces (the kali-witness container)", run: runWitnessRelay})
}

func runWitnessRelay(args []string) int {
	e := newEnvFlags("witness-relay")
	var cfg auditrelay.Config
	e.String(&cfg.Socket, "socket", "APTL_WITNESS_RELAY_SOCKET", "/var/lib/aptl-witness/relay.sock", "the socket the sidecar connects to, on a volume only the relay and the sidecar mount")
	e.Int(&cfg.PeerUID, "peer-uid", "APTL_WITNESS_RELAY_PEER_UID", 0, "uid the sidecar connects as (SO_PEERCRED); every other peer is refused")
	e.Int(&cfg.PeerGID, "peer-gid", "APTL_WITNESS_RELAY_PEER_GID", 10001, "gid the sidecar connects as (SO_PEERCRED); every other peer is refused")
	logging := e.LoggingFlags("APTL_WITNESS_RELAY_", "json")
	if err := e.Parse(args); err != nil {
		return failUsage("witness-relay", err)
	}
	if err := logging.Check(); err != nil {
		return failUsage("witness-relay", err)
	}
	if err := peercred.CheckIDs(cfg.PeerUID, cfg.PeerGID); err != nil {
		return failUsage("witness-relay", e.SettingError("peer-uid", "the sidecar's %v", err))
	}
	log := cliconfig.NewLogger(os.Stderr, logging.Format(), logging.Level())
	cfg.Log = log
	if err := checkRelayReach(); err != nil {
		log.Error("witness relay: the kernel's audit cannot be served from here", "err", err.Error())
		return exitFailure
	}
	s, err := auditrelay.Listen(cfg)
	if err != nil {
		log.Error("witness relay", "err", err.Error())
		return exitFailure
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("witness relay serving", "socket", cfg.Socket, "peer_uid", cfg.PeerUID, "peer_gid", cfg.PeerGID)
	if err := s.Serve(ctx); err != nil {
		log.Error("witness relay", "err", err.Error())
		return exitFailure
	}
	log.Info("witness relay stopped")
	return exitOK
}

// checkRelayReach fails at start, with what to change, where the kernel
// would refuse every request: outside the initial PID namespace, without
// CAP_AUDIT_CONTROL, or without CAP_AUDIT_READ for the records. It never
// changes the kernel's state.
func checkRelayReach() error {
	c, err := auditnetlink.OpenControl()
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Status(); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("read the audit status: %w (the kernel answers only the initial PID namespace, with CAP_AUDIT_CONTROL: run the relay with the host's PID namespace, pid: host)", err)
		}
		return fmt.Errorf("read the audit status: %w", err)
	}
	m, err := auditnetlink.OpenMulticast()
	if err != nil {
		return fmt.Errorf("%w (and the records are multicast only in the initial network namespace: network_mode: host)", err)
	}
	return m.Close()
}
