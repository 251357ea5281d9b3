//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/diskstate"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/agentclient"
	"github.com/aptl/aptl-kali-capture/launch/local"
	"github.com/aptl/aptl-kali-capture/launch/login"
	"github.com/aptl/aptl-kali-capture/sessionkey"
	"github.com/aptl/aptl-kali-capture/ship"
	"github.com/aptl/aptl-kali-capture/witness/audit"
)

// readyFileName is the readiness file's name in the state directory, its
// default place (docs/OPERATING.md, "Readiness and health"): each instance has its
// own state directory, so a second server on the same host neither
// satisfies nor removes the first one's file, and a server that is not
// root can write it. Containers may still set --ready-file (the image
// uses /run/aptl-kali-capture-ready).
const readyFileName = "ready"

// resolveReadyFile is --ready-file, or the default under the state directory.
func resolveReadyFile(readyFile, stateDir string) string {
	if readyFile != "" {
		return readyFile
	}
	return filepath.Join(stateDir, readyFileName)
}

// Capability states in the readiness file.
const (
	stateOK       = "ok"
	stateDegraded = "degraded"
	stateDisabled = "disabled"
)

// witnessStates are the witnesses' readiness: ok, degraded (the engine
// could not start) or disabled (--classes; for pcap also the host's
// initial network namespace, pcapReason saying so). procacct is derived
// from the audit witness's records, so it shares its state.
type witnessStates struct {
	pcap, audit string
	pcapReason  string        // why pcap is disabled where the class is selected
	auditEngine *audit.Engine // nil unless audit is ok; its counts go to the file
	// disk is the capture volume's state (disk.go): the file's disk key,
	// rewritten at every transition. Reported, never a failure of health.
	disk *diskstate.Monitor
	// keys is the session key pool (nil with --session-keys host-key):
	// the file's session_keys lines, refreshed with the counts.
	keys *sessionkey.Pool
	// ship is the shipper (nil without a bucket): the file's ship lines,
	// refreshed with the counts.
	ship *ship.Shipper
}

// readiness maintains the readiness file: key=value lines saying when the
// sidecar became ready and the state of each capability.
type readiness struct {
	path      string
	adapter   string
	witnesses witnessStates
	// listen is the address the server listens on; with pid, it lets
	// health check that the file is this instance's and that it still runs.
	listen  string
	log     *slog.Logger
	readyAt time.Time
	mu      sync.Mutex // serializes writes: the launch watcher and the audit counts
	launch  string     // the state last written
	counts  string     // the audit counts last written
	disk    string     // the disk state last heard; "" without a monitor
}

func newReadiness(path, adapter, listen string, log *slog.Logger) *readiness {
	return &readiness{path: path, adapter: adapter, listen: listen, log: log, readyAt: time.Now().UTC()}
}

// set writes the file when the launch state changes.
func (r *readiness) set(launchState string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if launchState == r.launch {
		return
	}
	r.launch = launchState
	r.log.Info("readiness", "launch", launchState, "adapter", r.adapter)
	r.writeLocked()
}

// setDisk rewrites the file when the disk state changes.
func (r *readiness) setDisk(state string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if state == r.disk {
		return
	}
	r.disk = state
	if r.launch != "" {
		r.writeLocked()
	}
}

// refreshCounts rewrites the file when the audit counts changed.
func (r *readiness) refreshCounts() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.launch == "" || r.countLines() == r.counts {
		return
	}
	r.writeLocked()
}

// countLines are the lines the counts' watcher keeps current.
func (r *readiness) countLines() string {
	return r.auditCounts() + sessionKeyState(r.witnesses.keys) + shipState(r.witnesses.ship)
}

// auditCounts are the audit witness's counts as readiness lines.
func (r *readiness) auditCounts() string {
	eng := r.witnesses.auditEngine
	if eng == nil {
		return ""
	}
	st := eng.Stats()
	counts := fmt.Sprintf("audit_rules=%d\naudit_sessions=%d\naudit_events=%d\naudit_lost=%d\naudit_overruns=%d\naudit_unattributed=%d\naudit_uring=%s\n",
		st.Rules, st.Sessions, st.Events, st.Lost, st.Overruns, st.Unattributed, st.URing)
	if st.Relayed {
		relay := "up"
		if st.RelayDown {
			relay = "down"
		}
		counts += "audit_relay=" + relay + "\n"
	}
	return counts
}

// auditState is the audit witness's state now: what it started as, or
// degraded while the witness relay is away.
func (w witnessStates) auditState() string {
	if w.auditEngine != nil && w.audit == stateOK && w.auditEngine.Stats().RelayDown {
		return stateDegraded
	}
	return w.audit
}

// writeLocked writes the file. Callers hold mu.
func (r *readiness) writeLocked() {
	r.counts = r.countLines()
	w := r.witnesses
	body := fmt.Sprintf("ready_at=%s\nlisten=%s\nlisten_addr=%s\npid=%d\npty=%s\npcap=%s\nauditd=%s\nprocacct=%s\nlaunch=%s\nadapter=%s\n",
		r.readyAt.Format(time.RFC3339Nano), stateOK, r.listen, os.Getpid(), stateOK, w.pcap, w.auditState(), w.auditState(), r.launch, r.adapter)
	if w.pcapReason != "" {
		body += "pcap_reason=" + w.pcapReason + "\n"
	}
	if r.disk != "" {
		body += vocab.ReadyKeyDisk + "=" + r.disk + "\n"
	}
	writeReadyFile(r.path, body+r.counts, r.log)
}

// Listen states in the readiness file: ok once the SSH listener is open,
// taken while another process holds its address (cmd/aptl-kali-capture/listen.go).
const stateTaken = "taken"

// writeListenTaken states that the SSH listen address is held by another
// process. It has no ready_at: the compose workload's supervisor reads
// ready_at as "a sidecar is serving" (compose/kali/aptl-agent-supervise).
func writeListenTaken(path, addr string, log *slog.Logger) {
	body := fmt.Sprintf("listen=%s\nlisten_addr=%s\nsince=%s\nrecording=no\n",
		stateTaken, addr, time.Now().UTC().Format(time.RFC3339))
	writeReadyFile(path, body, log)
}

// writeReadyFile replaces the readiness file atomically (a temporary file
// renamed over it), so health never reads half a file.
func writeReadyFile(path, body string, log *slog.Logger) {
	if err := safefs.ReplaceFile(path, []byte(body), 0o644); err != nil {
		log.Warn("readiness file not written", "path", path, "err", err.Error())
	}
}

// remove withdraws readiness when the server stops.
func (r *readiness) remove() { os.Remove(r.path) }

// prober is the part of the agent adapter readiness uses.
type prober interface {
	Probe(ctx context.Context) error
}

// probeTimeout bounds one readiness probe of the agent.
const probeTimeout = 2 * time.Second

// degradedProbeInterval is how often readiness probes an agent that did
// not answer, so that launch=ok is back within it of the agent's return
// (the compose supervisor restarts a dead agent in about 2 s).
const degradedProbeInterval = 500 * time.Millisecond

// watchLaunch keeps the launch state current until ctx ends: ok while the
// agent answers, degraded while it does not (session starts then wait for
// it, bounded by --agent-wait, and are refused with a record, never run
// unrecorded). It probes every interval, every degradedProbeInterval while
// degraded, and at once when kick fires (a session start found the agent
// unreachable, or reached it after waiting). Each probe is bounded by
// probeTimeout.
func (r *readiness) watchLaunch(ctx context.Context, p prober, every time.Duration, kick <-chan struct{}) {
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := p.Probe(pctx)
		cancel()
		next := every
		if err != nil {
			if r.launchState() != stateDegraded {
				r.log.Warn("launch agent unreachable", "err", err.Error())
			}
			r.set(stateDegraded)
			next = min(every, degradedProbeInterval)
		} else {
			r.set(stateOK)
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-kick:
			t.Stop()
		case <-t.C:
		}
	}
}

// launchState is the launch state last written.
func (r *readiness) launchState() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.launch
}

// launchKick is the agent adapter's nudge to readiness: its reachability
// hook sends without blocking (one pending nudge is enough), watchLaunch
// receives.
type launchKick chan struct{}

func newLaunchKick() launchKick { return make(launchKick, 1) }

func (k launchKick) send() {
	select {
	case k <- struct{}{}:
	default:
	}
}

// startReadiness writes the readiness file and, for the agent adapter,
// keeps it current. The returned function stops that and withdraws it; it
// may be called more than once (at the signal, and deferred).
func startReadiness(cfg *serveConfig, listen string, probe prober, kick launchKick, ws witnessStates, log *slog.Logger) (stop func()) {
	ready := newReadiness(resolveReadyFile(cfg.readyFile, cfg.stateDir), cfg.launch, listen, log)
	ready.witnesses = ws
	unsubscribe := func() {}
	if ws.disk != nil {
		ready.disk = string(ws.disk.State())
		unsubscribe = ws.disk.Subscribe(func(t diskstate.Transition) { ready.setDisk(string(t.State)) })
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if probe == nil {
		ready.set(stateOK)
	} else {
		// The workload may start after the sidecar: serve anyway, degraded,
		// and refuse sessions (with a record) until the agent answers.
		wg.Go(func() { ready.watchLaunch(ctx, probe, cfg.agentProbe, kick) })
	}
	if ws.auditEngine != nil || ws.keys != nil || ws.ship != nil {
		wg.Go(func() { ready.watchCounts(ctx, countsInterval) })
	}
	return sync.OnceFunc(func() {
		unsubscribe()
		cancel()
		wg.Wait()
		ready.remove()
	})
}

// countsInterval is how often the audit counts and the witness relay's
// state in the readiness file are brought up to date (written only when
// they changed).
const countsInterval = time.Second

// watchCounts keeps the audit counts and the session keys left current
// until ctx ends.
func (r *readiness) watchCounts(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.refreshCounts()
		}
	}
}

// newLauncher builds the configured adapter; the agent's also gets a
// readiness watcher, which kick nudges.
func newLauncher(cfg *serveConfig, kick launchKick, log *slog.Logger) (launch.Launcher, prober, error) {
	if cfg.launch == "local" {
		useTrampolineBeside(log)
		return local.New(), nil, nil
	}
	opts := []agentclient.AgentOption{agentclient.WithDialTimeout(cfg.agentDial), agentclient.WithReplyTimeout(cfg.agentReply), agentclient.WithAgentUID(cfg.agentUID),
		agentclient.WithUnreachableWait(cfg.agentWait), agentclient.WithReachabilityHook(kick.send), agentclient.WithLogger(log)}
	if cfg.insecureAgentSamePIDNS {
		opts = append(opts, agentclient.InsecureAllowAgentInSamePIDNS())
	}
	a, err := agentclient.NewAgent(cfg.agentSocket, opts...)
	if err != nil {
		return nil, nil, err
	}
	return a, a, nil
}

// useTrampolineBeside has the local adapter's sessions start through
// aptl-login-trampoline when that program lies beside this one (the
// benchmark builds both; so can an operator, from one build): it starts in a fifth of the time this
// program takes (login.UseTrampolineProgram says why). Without it, or when
// it is refused (the warning says why), sessions re-execute this program:
// slower to start, the same record.
func useTrampolineBeside(log *slog.Logger) {
	exe, err := os.Executable()
	if err != nil {
		log.Debug("login trampoline: this program (its own path is unknown)", "err", err.Error())
		return
	}
	path := filepath.Join(filepath.Dir(exe), login.TrampolineProgram)
	if err := login.UseTrampolineProgram(path); errors.Is(err, fs.ErrNotExist) {
		log.Debug("login trampoline: this program (no " + login.TrampolineProgram + " beside it)")
		return
	} else if err != nil {
		log.Warn("login trampoline: this program, not the one beside it", "err", err.Error())
		return
	}
	log.Info("login trampoline", "program", path)
}
