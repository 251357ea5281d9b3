//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

func TestParseServeConfigAudit(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "lab.rules")
	bad := filepath.Join(dir, "bad.rules")
	os.WriteFile(good, []byte("-a always,exit -F arch=b64 -S execve -k aptl_exec\n"), 0o600)
	os.WriteFile(bad, []byte("# ok\n-a always,exit -F arch=b64 -S nosuchcall\n"), 0o600)

	c, err := parseServeConfig(nil, testutil.MapLookup(map[string]string{"APTL_CAPTURE_CLASSES": "pty,audit", "APTL_CAPTURE_AUDIT_RULES": good}))
	if err != nil {
		t.Fatal(err)
	}
	if c.auditRules == nil || len(c.auditRules.Rules) != 1 || c.auditLimits.RotateBytes != 100<<20 || c.auditLimits.Files != 10 {
		t.Errorf("audit settings: rules %+v limits %+v", c.auditRules, c.auditLimits)
	}
	if c, err := parseServeConfig(nil, testutil.MapLookup(nil)); err != nil || c.auditRules != nil {
		t.Errorf("default: audit rules %+v, %v; want none (audit not in the default classes)", c.auditRules, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--classes", "pty,audit"}, "--audit-rules / APTL_CAPTURE_AUDIT_RULES: the audit class needs a rules file"},
		{[]string{"--audit-rules", good}, "the audit class is not selected"},
		{[]string{"--classes", "pty,audit", "--audit-rules", bad}, bad + ":2: -S nosuchcall"},
		{[]string{"--classes", "pty,audit", "--audit-rules", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"--classes", "pty,audit", "--audit-rules", good, "--audit-files", "0"}, "--audit-files"},
	} {
		_, err := parseServeConfig(tc.args, testutil.MapLookup(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestParseServeConfigAuditRelay(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "lab.rules")
	os.WriteFile(rules, []byte("-a always,exit -F arch=b64 -S execve -k aptl_exec\n"), 0o600)
	audit := []string{"--classes", "pty,audit", "--audit-rules", rules}
	c, err := parseServeConfig(append(audit, "--audit-relay", "/run/aptl-witness/relay.sock"), testutil.MapLookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.auditRelay; p == nil || p.Socket != "/run/aptl-witness/relay.sock" || p.UID != 0 || p.GID != 10002 {
		t.Fatalf("relay peer %+v, want the socket with uid 0 gid 10002", p)
	}
	if c, err := parseServeConfig(audit, testutil.MapLookup(nil)); err != nil || c.auditRelay != nil {
		t.Errorf("without --audit-relay: %+v, %v; want the kernel's netlink directly", c.auditRelay, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--audit-relay", "/run/r.sock"}, "--audit-relay / APTL_CAPTURE_AUDIT_RELAY: is set, but the audit class is not selected"},
		{append(audit, "--audit-relay", "relay.sock"), `must be an absolute path, not "relay.sock"`},
		{append(audit, "--audit-relay", "/r.sock", "--audit-relay-gid", "-1"), "the witness relay's gid -1"},
	} {
		_, err := parseServeConfig(tc.args, testutil.MapLookup(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
