package audit

import (
	"errors"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/witness/auditrelay"
)

// The engine through the witness relay (witness/auditrelay), where the
// sidecar cannot reach the kernel's audit itself.
//
// The relay is one more thing the witness relies on, watched like
// auditing's enabled flag and its rules (kernelwatch_linux.go): while it
// cannot be reached nothing reaches the engine, so the window from the
// last read that found it alive to the reconnection is a gap of every
// open session (vocab.GapAuditRelayDown), stated at once with why, and
// again whole when it ends; a session that starts or closes inside it
// gets it too. The window starts at the relay's last idle frame (the last
// instant it had sent every record it had read), not at the last read:
// what it had queued when it went is lost too. The loop retries every
// relayRetry. At the reconnection it ends the window and checks at once
// what the witness relies on (auditing on, every rule: the relay may have
// come back on a kernel whose rules someone removed meanwhile), as every
// poll does, restoring it and stating that window by its own reason.

// relayRetry is the wait between attempts to reach a missing relay.
const relayRetry = time.Second

// startRelayed starts the engine on the relay; a relay that cannot be
// reached yet opens the window at once, and the loop connects later.
func (e *Engine) startRelayed(cfg Config) error {
	e.relay = cfg.Relay
	if err := e.openFiles(cfg); err != nil {
		return err
	}
	now := time.Now()
	e.relayDown = blindness{reason: vocab.GapAuditRelayDown, good: now}
	if err := e.connectRelay(now); err != nil {
		e.lostRelay(err, now)
	} else {
		e.log.Info("audit: the witness relay serves the kernel's audit", "socket", e.relay.Socket)
	}
	go e.loop()
	return nil
}

// connectRelay dials both connections and takes them as the kernel: the
// first time with everything Start does (rules loaded, their listed forms
// learnt), later by swapping them in and checking at once what the
// witness relies on (kernelwatch_linux.go), which restores what is
// missing and states its own windows: a refusal there (a configuration
// locked meanwhile) is such a window, never a reason to stay away from a
// relay that answers.
func (e *Engine) connectRelay(now time.Time) error {
	ctl, err := auditrelay.DialControl(*e.relay)
	if err != nil {
		return err
	}
	mc, err := auditrelay.DialRecords(*e.relay)
	if err != nil {
		ctl.Close()
		return err
	}
	e.mu.Lock()
	attached := e.attached
	e.mu.Unlock()
	if !attached {
		if err := e.attachKernel(&control{raw: ctl}, mc, now); err != nil {
			ctl.Close()
			mc.Close()
			e.statusMu.Lock()
			e.ctl, e.mc = nil, nil
			e.statusMu.Unlock()
			return err
		}
		return nil
	}
	e.statusMu.Lock()
	e.ctl, e.mc = &control{raw: ctl}, mc
	e.statusMu.Unlock()
	return nil
}

// lostRelay opens the relay's window, from the last instant records were
// known to reach the engine; a window already open stays as it is.
func (e *Engine) lostRelay(err error, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := &e.relayDown
	if b.open {
		return
	}
	b.open, b.err, b.count = true, err.Error(), 0
	e.gapLocked(b.window(now))
	e.log.Warn("audit: the witness relay is unreachable; sessions record a gap until it is back, and the engine reconnects by itself",
		"since", b.good.UTC().Format(time.RFC3339Nano), "err", err.Error())
}

// reconnect is one attempt of the loop's to reach the relay again, at
// most one every relayRetry (a relay that accepts and drops at once does
// not make the loop spin).
func (e *Engine) reconnect(now time.Time) {
	if wait := relayRetry - time.Since(e.lastAttempt); wait > 0 {
		for deadline := time.Now().Add(wait); time.Now().Before(deadline) && !e.stop.Load(); {
			time.Sleep(pollEvery)
		}
		if e.stop.Load() {
			return
		}
		now = time.Now()
	}
	e.lastAttempt = now
	e.statusMu.Lock()
	if e.mc != nil {
		e.mc.Close()
	}
	if e.ctl != nil {
		e.ctl.Close()
	}
	e.ctl, e.mc = nil, nil
	e.statusMu.Unlock()
	if err := e.connectRelay(now); err != nil {
		e.mu.Lock()
		if e.relayDown.err != err.Error() {
			e.relayDown.err = err.Error()
			e.log.Info("audit: the witness relay is still unreachable", "err", err.Error())
		}
		e.mu.Unlock()
		return
	}
	e.mu.Lock()
	b := &e.relayDown
	end := time.Now()
	g := b.window(end)
	g.err = ""
	e.gapLocked(g)
	e.log.Warn("audit: the witness relay is reachable again; the sessions' records hold the window as a gap",
		"since", b.good.UTC().Format(time.RFC3339Nano))
	b.open, b.err, b.good = false, "", end
	e.mu.Unlock()
	// What the witness relies on, checked now rather than at the next
	// poll: the kernel's rules may have gone while nobody was watching.
	e.pollStatus(end)
}

// overruns is the count an overrun error carries: the relay counts
// datagrams dropped on its side, the kernel's socket only says "some".
func overruns(err error) uint64 {
	var o *auditrelay.OverrunError
	if errors.As(err, &o) && o.Count > 0 {
		return o.Count
	}
	return 1
}
