//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
	"github.com/aptl/aptl-kali-capture/internal/diskstate"
	"github.com/aptl/aptl-kali-capture/launch/login"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/sessionkey"
	"github.com/aptl/aptl-kali-capture/ship"
	"github.com/aptl/aptl-kali-capture/witness/audit"
	"github.com/aptl/aptl-kali-capture/witness/pcap"
)

func init() {
	register("serve", command{summary: "run the SSH server and record every session", run: runServe})
}

// Names of the newcomer's files in the state directory.
const (
	clientKeyFile      = "client_ed25519"
	authorizedKeysFile = "authorized_keys"
	knownHostsFile     = "known_hosts"
)

func runServe(args []string) int {
	cfg, err := parseServeConfig(args, os.LookupEnv)
	if err != nil {
		return failUsage("serve", err)
	}
	for _, name := range cfg.unknownEnv {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture serve: warning: %s is not a setting (misspelt?); see 'aptl-kali-capture serve -h'\n", name)
	}
	if cfg.checkOnly {
		printSettings(os.Stdout, os.Stderr, cfg)
		return exitOK
	}
	log := cliconfig.NewLogger(os.Stderr, cfg.logFormat, cfg.logLevel)
	if err := serve(cfg, log, os.Stdout); err != nil {
		log.Error("serve failed", "err", err.Error())
		if errors.Is(err, errPortTaken) {
			return exitPortTaken
		}
		return exitFailure
	}
	return exitOK
}

func serve(cfg *serveConfig, log *slog.Logger, out io.Writer) error {
	// Here, not in prepareProcess: the examiner's subcommands start no
	// session and may be given a descriptor to read (verify --key
	// /dev/fd/63). login.KeepInheritedFDsFromSessions says why serve must.
	if err := login.KeepInheritedFDsFromSessions(log); err != nil {
		return err
	}
	if err := checkServeFolders(cfg); err != nil {
		return err
	}
	hostKey, err := broker.LoadOrCreateKey(filepath.Join(cfg.stateDir, broker.HostKeyFile), "aptl-kali-capture host key")
	if err != nil {
		return fmt.Errorf("host key: %w", err)
	}
	akPath, clientKey, err := authorizedKeysPath(cfg)
	if err != nil {
		return err
	}
	ak, err := broker.LoadAuthorizedKeys(akPath)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.root, 0o700); err != nil {
		return fmt.Errorf("capture root: %w", err)
	}
	disk, stopDisk, err := startDisk(cfg, diskstate.StatfsSource(cfg.root), log)
	if err != nil {
		return fmt.Errorf("capture volume: %w", err)
	}
	defer stopDisk()
	// The sessions on disk are listed before the port opens; those a crash
	// left unfinalized are recovered in the background once it is open
	// (startRecovery), so no folder can keep the port closed. A session
	// started meanwhile makes a new folder, never on this list.
	pending, err := recorder.ListSessions(cfg.root)
	if err != nil {
		log.Error("listing sessions for recovery incomplete", "err", err.Error())
	}
	// Reserves a crash left named (only without O_TMPFILE) are removed
	// before any session takes one.
	if err := recorder.SweepReserves(cfg.root); err != nil {
		log.Error("removing stale reserves incomplete", "err", err.Error())
	}
	// Session starts a crash cut before their record was published hold
	// no transcript; they are removed before any session starts.
	if n, err := recorder.SweepStarts(cfg.root); err != nil {
		log.Error("removing cut session starts incomplete", "removed", n, "err", err.Error())
	} else if n > 0 {
		log.Warn("removed session starts a crash cut before their record was published", "removed", n)
	}
	// The agent adapter nudges readiness when a session start finds the
	// agent unreachable, so launch=degraded does not wait for the next probe.
	kick := newLaunchKick()
	launcher, probe, err := newLauncher(cfg, kick, log)
	if err != nil {
		return err
	}
	var pcapSource *pcap.Source
	if cfg.pcap {
		pcapSource = pcap.NewSource(cfg.pcapLimits, log, "the capture engine has not started")
	}
	var auditSource *audit.Source
	if cfg.auditRules != nil {
		auditSource = audit.NewSource(cfg.auditLimits, log, "the audit witness has not started")
	}
	userExists := localUserCheck(launcher, cfg.users, log)
	keys, err := openSessionKeys(cfg, log)
	if err != nil {
		return err
	}
	var keySource recorder.KeySource
	if keys != nil {
		defer keys.Close()
		keySource = keys
	}
	shipper, err := openShipper(cfg, log)
	if err != nil {
		return err
	}
	// Deferred before the server's shutdown, so run after it: the
	// sessions' closes are the last points to ship.
	defer closeShipper(shipper, log)
	// Stopped after the witnesses, whose last records it ships.
	defer startRootLogs(shipper, cfg.root, log)()
	srv, err := broker.New(broker.Config{
		HostKey:            hostKey,
		AuthorizedKeys:     ak,
		Users:              cfg.users,
		UserExists:         userExists,
		Launcher:           launcher,
		CaptureRoot:        cfg.root,
		AcceptEnv:          cfg.acceptEnv,
		Limits:             cfg.limits,
		Logger:             log,
		Sync:               cfg.sync,
		MaxTranscriptBytes: cfg.maxTranscript,
		Algorithms:         cfg.algorithms,
		Witnesses:          witnesses(pcapSource, auditSource),
		Version:            buildVersion(),
		PTYEOF:             cfg.ptyEOF,
		PTYEOFWait:         cfg.ptyEOFWait,
		ClientAlive:        cfg.clientAlive,
		Disk:               disk,
		WitnessBudget:      newWitnessBudget(cfg, disk.Status().Usage.Size, log),
		SessionKeys:        keySource,
		HostKeyFallback:    cfg.sessionKeys == sessionKeysPoolOrHost,
		Shipper:            shipper,
	})
	if err != nil {
		return err
	}
	ln, err := listenSSH(cfg, log)
	if err != nil {
		return err
	}
	lowerGuardCapability(log)
	log.Info("listening", "addr", ln.Addr().String(), "adapter", cfg.launch, "root", cfg.root,
		"host_key", gossh.FingerprintSHA256(hostKey.PublicKey()))
	logAlgorithms(log, cfg.algorithms)
	if probe != nil {
		log.Info("launch agent", "socket", cfg.agentSocket)
	}
	pcapState, pcapOff, stopPcap := startPcap(pcapSource, ln.Addr(), cfg.pcapHostNetns, log)
	defer stopPcap()
	auditState, auditEngine, stopAudit := startAudit(auditSource, cfg, log)
	defer stopAudit()
	withdraw := startReadiness(cfg, ln.Addr().String(), probe, kick, witnessStates{pcap: pcapState, pcapReason: pcapOff, audit: auditState, auditEngine: auditEngine, disk: disk, keys: keys, ship: shipper}, log)
	defer withdraw()
	defer startRecovery(pending, recorder.Options{Signer: hostKey, SessionKeys: keySource}, keys, shipper, cfg.root, log)()
	warnDevClientKey(log, ln.Addr(), clientKey)
	if clientKey != "" {
		if err := printNewcomerHelp(out, cfg, ln.Addr(), hostKey.PublicKey(), clientKey, pcapOff); err != nil {
			return err
		}
	}
	return serveUntilSignal(srv, ln, cfg, withdraw, log)
}

// startRecovery recovers the listed sessions that need it in the
// background, logging each outcome and the totals, then (with a shipper)
// ships what the capture root holds that the bucket does not. The returned function
// stops it between two sessions and waits for the one under way.
//
// A cut session's own key, left in the pool's active keys, signs its
// recovery statement and is destroyed with it; once every listed session
// is recovered, the active keys no session of this process uses (taken
// for a session the crash never opened, or whose seal it cut short) are
// destroyed too.
func startRecovery(pending []recorder.SessionFolder, opts recorder.Options, keys *sessionkey.Pool, shipper *ship.Shipper, root string, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		log.Info("recovery of unfinalized sessions started", "sessions", len(pending))
		var recovered, failed int
		recorder.RecoverSessions(ctx, pending, opts, func(o recorder.RecoveryOutcome) {
			if o.Err != nil {
				failed++
				log.Error("unfinalized session not recovered", "dir", o.Dir, "err", o.Err.Error())
				return
			}
			recovered++
			if o.KeyErr != nil {
				log.Warn("recovery statement signed by the host key: the session's own key is gone", "dir", o.Dir, "err", o.KeyErr.Error())
			}
			if o.KeyDestroyErr != nil {
				log.Error("the recovered session's key was not destroyed", "dir", o.Dir, "err", o.KeyDestroyErr.Error())
			}
			if o.ManifestErr != nil {
				log.Warn("unfinalized session recovered; its manifest was not written", "dir", o.Dir, "err", o.ManifestErr.Error())
				return
			}
			log.Warn("unfinalized session recovered", "dir", o.Dir)
		})
		log.Info("recovery of unfinalized sessions finished", "recovered", recovered, "failed", failed, "stopped_early", ctx.Err() != nil)
		if keys != nil && ctx.Err() == nil {
			n, err := keys.DestroyLeftovers()
			if err != nil {
				log.Error("session keys a stopped sidecar left active were not all destroyed", "destroyed", n, "err", err.Error())
			} else if n > 0 {
				log.Warn("destroyed session keys a stopped sidecar left active, no session's", "destroyed", n)
			}
		}
		// Once the cut sessions are sealed, the bucket is brought up to
		// the capture root: what earlier runs left unshipped.
		if shipper != nil && ctx.Err() == nil {
			folders := make([]ship.Folder, len(pending))
			for i, p := range pending {
				folders[i] = ship.Folder{Run: p.Run, Session: p.Session}
			}
			if _, err := shipper.Resume(ctx, root, folders); err != nil && ctx.Err() == nil {
				log.Error("shipping what earlier runs left unshipped stopped", "err", err.Error())
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// logAlgorithms states the transport algorithms offered, as the library
// sends them, and warns when a lab setting re-enabled insecure ones.
func logAlgorithms(log *slog.Logger, algs broker.Algorithms) {
	offered := algs.Offered()
	log.Info("algorithms", "kex", strings.Join(offered.KeyExchanges, ","),
		"ciphers", strings.Join(offered.Ciphers, ","), "macs", strings.Join(offered.MACs, ","),
		"host_key", "ssh-ed25519", "strict_kex", true)
	if bad := algs.Insecure(); len(bad) > 0 {
		log.Warn("insecure algorithms enabled by setting", "algorithms", strings.Join(bad, ","))
	}
}

// serveUntilSignal serves until SIGTERM or SIGINT, then shuts down so that
// every open session's record is finalized ("sidecar-shutdown"). Readiness
// is withdrawn at the signal, not after the (up to --shutdown-grace long)
// shutdown: the compose workload's supervisor reads its absence as "this
// sidecar is stopping" (compose/kali/aptl-agent-supervise).
func serveUntilSignal(srv *broker.Server, ln net.Listener, cfg *serveConfig, withdrawReadiness func(), log *slog.Logger) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case sig := <-sigs:
		// The handshakes still pending say whether a flood was under way.
		log.Info("shutting down", "signal", sig.String(), "open_sessions", srv.ActiveSessions(), "unauthenticated_conns", srv.UnauthenticatedConns())
	}
	withdrawReadiness()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, broker.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}

// authorizedKeysPath returns the authorized_keys file to load. When none is
// configured, it is <state>/authorized_keys, created on first start with a
// newly generated client key so that a newcomer can log in at once; the
// client key's path is then returned too.
func authorizedKeysPath(cfg *serveConfig) (path, clientKey string, err error) {
	if cfg.authorizedKeys != "" {
		return cfg.authorizedKeys, "", nil
	}
	path = filepath.Join(cfg.stateDir, authorizedKeysFile)
	clientKey = filepath.Join(cfg.stateDir, clientKeyFile)
	if _, err := os.Stat(path); err == nil {
		if _, err := os.Stat(clientKey); err != nil {
			clientKey = "" // an operator's own file: no newcomer help
		}
		return path, clientKey, nil
	}
	signer, err := broker.LoadOrCreateKey(clientKey, "aptl-kali-capture newcomer client key")
	if err != nil {
		return "", "", fmt.Errorf("client key: %w", err)
	}
	line := gossh.MarshalAuthorizedKey(signer.PublicKey())
	if err := os.WriteFile(path, line, 0o600); err != nil {
		return "", "", fmt.Errorf("authorized keys: %w", err)
	}
	return path, clientKey, nil
}

// printNewcomerHelp writes a known_hosts file for the listening address and
// prints the exact ssh command that logs in with the newcomer key.
func printNewcomerHelp(out io.Writer, cfg *serveConfig, addr net.Addr, hostKey gossh.PublicKey, clientKey, pcapOff string) error {
	tcp, _ := addr.(*net.TCPAddr)
	host := "127.0.0.1"
	if tcp != nil && !tcp.IP.IsUnspecified() {
		host = tcp.IP.String()
	}
	port := 22
	if tcp != nil {
		port = tcp.Port
	}
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	kh := filepath.Join(cfg.stateDir, knownHostsFile)
	hostPattern := host
	if port != 22 {
		hostPattern = fmt.Sprintf("[%s]:%d", host, port)
	}
	line := hostPattern + " " + strings.TrimSpace(string(gossh.MarshalAuthorizedKey(hostKey))) + "\n"
	if err := os.WriteFile(kh, []byte(line), 0o644); err != nil {
		return fmt.Errorf("known_hosts: %w", err)
	}
	fmt.Fprintf(out, "aptl-kali-capture is recording sessions under %s\n", abs(cfg.root))
	if pcapOff != "" {
		fmt.Fprintf(out, "Packets are not captured: %s.\n", pcapOff)
	}
	fmt.Fprintf(out, "Connect with stock OpenSSH:\n\n  ssh -p %d -i %s -o IdentitiesOnly=yes -o %s %s\n\n",
		port, shellQuote(abs(clientKey)), shellQuote("UserKnownHostsFile="+abs(kh)), shellQuote(cfg.users[0]+"@"+host))
	return nil
}

// witnesses lists the selected witness classes for the broker.
func witnesses(pcapSource *pcap.Source, auditSource *audit.Source) []recorder.WitnessSource {
	var ws []recorder.WitnessSource
	if pcapSource != nil {
		ws = append(ws, pcapSource)
	}
	if auditSource != nil {
		ws = append(ws, auditSource)
	}
	return ws
}

// startPcap starts the capture engine once the listener's port is known
// (its own traffic is left out in the kernel), and returns the readiness
// state: disabled when the class is not selected, or when serve runs in
// the host's initial network namespace without --pcap-host-netns (off
// then says why, and each session's open record too); degraded when the
// engine cannot start (no CAP_NET_RAW): sessions then run and are
// transcribed, and their open records say pcap was unavailable and why.
func startPcap(src *pcap.Source, addr net.Addr, hostAllowed bool, log *slog.Logger) (state, off string, stop func()) {
	if src == nil {
		return stateDisabled, "", func() {}
	}
	where := pcap.CheckNetns()
	if capture, reason := pcap.Scope(where, hostAllowed); !capture {
		log.Warn("pcap capture off; sessions are recorded without packets", "reason", reason)
		src.Disable(reason)
		return stateDisabled, reason, func() {}
	}
	if where.Netns != pcap.NetnsOwn {
		log.Warn("pcap captures in the host's initial network namespace (--pcap-host-netns): every process's packets on the host are in each session's pcap files", "netns", where.Basis)
	}
	port := uint16(0)
	if ta, ok := addr.(*net.TCPAddr); ok {
		port = uint16(ta.Port)
	}
	eng, err := pcap.StartEngine(port, log)
	if err != nil {
		log.Warn("pcap capture unavailable; sessions are recorded without packets", "err", err.Error())
		src.SetEngine(nil, err.Error())
		return stateDegraded, "", func() {}
	}
	src.SetEngine(eng, "")
	log.Info("pcap capture", "snaplen", pcap.SnapLen, "excluded_tcp_port", port)
	return stateOK, "", func() {
		src.SetEngine(nil, "the capture engine stopped")
		if err := eng.Close(); err != nil {
			log.Warn("pcap: stop the capture engine", "err", err.Error())
		}
	}
}

// shellQuote quotes s for a POSIX shell when it holds anything but plainly
// safe characters, so the printed command runs as pasted (a state
// directory under "My Labs").
func shellQuote(s string) string {
	safe := s != ""
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("@%+=:,./_-[]", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
