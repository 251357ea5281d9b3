//go:build linux

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/internal/capability"
	"golang.org/x/sys/unix"
)

// errPortTaken is serve's failure when another process holds the SSH listen
// address for longer than --port-taken-wait; runServe exits exitPortTaken.
var errPortTaken = errors.New("SSH listen address held by another process")

// portTakenRetry is how often a taken address is tried again.
const portTakenRetry = time.Second

// listenSSH opens the SSH listener. When the address is in use, the process
// holding it is not this server: in a shared network namespace it may be a
// workload process waiting to answer the lab's clients in the sidecar's
// place. That must be loud, not a silent exit that a restart policy turns
// into a quiet crash loop: the error log names the address and says that
// sessions are not recorded, readiness says listen=taken (so `health`
// fails with that reason and the orchestrator shows the container
// unhealthy), and the bind is retried for cfg.portTakenWait before serve
// gives up with errPortTaken (exit status 4, distinct from any other).
// broker.Listen puts the loopback guard on the socket before it binds.
func listenSSH(cfg *serveConfig, log *slog.Logger) (net.Listener, error) {
	ln, err := broker.Listen(cfg.listen)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		return ln, nil
	}
	log.Error("SSH port taken by another process: sessions are NOT being recorded",
		"addr", cfg.listen, "retry_for", cfg.portTakenWait.String(), "exit_status", exitPortTaken)
	writeListenTaken(resolveReadyFile(cfg.readyFile, cfg.stateDir), cfg.listen, log)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	deadline := time.NewTimer(cfg.portTakenWait)
	defer deadline.Stop()
	retry := time.NewTicker(portTakenRetry)
	defer retry.Stop()
	for {
		select {
		case <-retry.C:
			ln, err = broker.Listen(cfg.listen)
			if err == nil {
				log.Warn("SSH port free again: listening", "addr", cfg.listen)
				return ln, nil
			}
		case <-deadline.C:
			return nil, fmt.Errorf("listen %s: %w for %v (last: %v): sessions are not being recorded", cfg.listen, errPortTaken, cfg.portTakenWait, err)
		case sig := <-sigs:
			return nil, fmt.Errorf("listen %s: %w (stopped by %v)", cfg.listen, errPortTaken, sig)
		}
	}
}

// lowerGuardCapability takes NET_ADMIN, where serve has it, out of every
// thread's effective set once the listener is open: the loopback guard's
// socket filter is its one use here, and the guard raises it on one
// locked thread for each attach (broker/ingress_linux.go). The Compose
// sidecar adds NET_ADMIN for that alone; a binary linked with cgo cannot
// change every thread's set, and keeps it effective, which the log says.
func lowerGuardCapability(log *slog.Logger) {
	if !capability.Effective(unix.CAP_NET_ADMIN) {
		return
	}
	if err := capability.LowerEverywhere(unix.CAP_NET_ADMIN); err != nil {
		log.Info("NET_ADMIN stays effective", "err", err.Error())
		return
	}
	log.Info("NET_ADMIN lowered: raised only to attach the loopback guard")
}
