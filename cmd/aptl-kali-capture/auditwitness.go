//go:build linux

package main

import (
	"log/slog"
	"path/filepath"

	"github.com/aptl/aptl-kali-capture/witness/audit"
)

// auditOwnedRulesFile, in the state directory, holds the digests of the
// rules the audit witness owns, so that rules a crash left in the kernel
// are removed by the next run (witness/audit/owned.go).
const auditOwnedRulesFile = "audit-rules-owned"

// startAudit starts the audit witness's engine: it loads the lab's rules
// (only those it adds are removed at stop) and reads the kernel's records
// through the read-only multicast group. It returns the readiness states
// of auditd and procacct, both derived from the one engine: disabled when
// the class is not selected, degraded when the engine cannot start (not
// root, no CAP_AUDIT_CONTROL or CAP_AUDIT_READ, the audit configuration
// locked): sessions then run and are transcribed, and their open records
// say audit was unavailable and why. Through the witness relay
// (--audit-relay) the engine starts even while the relay is away; the
// readiness file then says degraded until it is back (ready.go).
func startAudit(src *audit.Source, cfg *serveConfig, log *slog.Logger) (state string, eng *audit.Engine, stop func()) {
	if src == nil {
		return stateDisabled, nil, func() {}
	}
	for _, w := range cfg.auditRules.Warnings {
		log.Warn("audit rules: " + w)
	}
	eng, err := audit.Start(audit.Config{Root: cfg.root, Rules: cfg.auditRules, Limits: cfg.auditLimits, Log: log, Relay: cfg.auditRelay,
		OwnedRules: filepath.Join(cfg.stateDir, auditOwnedRulesFile)})
	if err != nil {
		log.Warn("audit witness unavailable; sessions are recorded without audit records", "err", err.Error())
		src.SetEngine(nil, err.Error())
		return stateDegraded, nil, func() {}
	}
	src.SetEngine(eng, "")
	log.Info("audit witness", "rules", eng.Stats().Rules)
	return stateOK, eng, func() {
		src.SetEngine(nil, "the audit witness stopped")
		st := eng.Stats()
		if err := eng.Close(); err != nil {
			log.Warn("audit: stop the audit witness", "err", err.Error())
		}
		log.Info("audit witness stopped", "sessions", st.Sessions, "events", st.Events, "lost", st.Lost, "overruns", st.Overruns, "unattributed", st.Unattributed)
	}
}
