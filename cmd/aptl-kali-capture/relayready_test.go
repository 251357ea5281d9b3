//go:build linux

package main

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/witness/audit"
	"github.com/aptl/aptl-kali-capture/witness/auditrelay"
)

// TestReadinessSaysDegradedWhileTheRelayIsAway: an engine configured with
// a witness relay that is not there starts anyway (it connects when the
// relay comes), and the readiness file says auditd=degraded and
// procacct=degraded, with audit_relay=down, and health prints them; it
// needs no privilege, as the sidecar in the pair has none for audit.
func TestReadinessSaysDegradedWhileTheRelayIsAway(t *testing.T) {
	rs, err := audit.ParseRules(strings.NewReader("-a always,exit -F arch=b64 -S execve -k aptl_exec\n"), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	peer := &auditrelay.Peer{Socket: filepath.Join(dir, "no-relay.sock"), UID: 0, GID: defaultRelayGID}
	eng, err := audit.Start(audit.Config{Root: dir, Rules: rs, Limits: audit.Limits{RotateBytes: 1 << 20, Files: 2}, Log: slog.New(slog.DiscardHandler), Relay: peer})
	if err != nil {
		t.Fatalf("start with the relay away: %v", err)
	}
	defer eng.Close()
	if st := eng.Stats(); !st.Relayed || !st.RelayDown {
		t.Fatalf("stats %+v, want relayed and down", st)
	}
	path := filepath.Join(dir, "ready")
	r := newReadiness(path, "local", "127.0.0.1:2222", slog.New(slog.DiscardHandler))
	r.witnesses = witnessStates{pcap: stateDisabled, audit: stateOK, auditEngine: eng}
	r.set(stateOK)
	for key, want := range map[string]string{"auditd": stateDegraded, "procacct": stateDegraded, "audit_relay": "down"} {
		if got := readinessValue(path, key); got != want {
			t.Errorf("readiness %s=%s, want %s", key, got, want)
		}
	}
	if line := healthLine(path); !strings.Contains(line, " auditd=degraded procacct=degraded") {
		t.Errorf("health line %q", line)
	}
}
