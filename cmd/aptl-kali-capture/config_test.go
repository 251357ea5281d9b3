package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseServeConfigDefaults(t *testing.T) {
	c, err := parseServeConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != defaultListen || c.root != defaultRoot || c.stateDir != defaultStateDir || c.launch != "local" {
		t.Errorf("defaults = %+v", c)
	}
	if c.authorizedKeys != "" {
		t.Error("authorized keys default should select the newcomer key")
	}
}

func TestParseServeConfigEnvAndFlags(t *testing.T) {
	t.Setenv("APTL_CAPTURE_LISTEN", "0.0.0.0:22")
	t.Setenv("APTL_CAPTURE_USERS", "kali, tools")
	t.Setenv("APTL_CAPTURE_LOGIN_GRACE", "5s")
	t.Setenv("APTL_CAPTURE_MAX_SESSIONS", "9")
	c, err := parseServeConfig([]string{"--max-sessions", "12", "--root", "/var/log/aptl/captures"})
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != "0.0.0.0:22" || c.root != "/var/log/aptl/captures" {
		t.Errorf("listen %q root %q", c.listen, c.root)
	}
	if len(c.users) != 2 || c.users[0] != "kali" || c.users[1] != "tools" {
		t.Errorf("users = %q", c.users)
	}
	if c.limits.LoginGrace != 5*time.Second {
		t.Errorf("login grace = %v", c.limits.LoginGrace)
	}
	if c.limits.MaxSessions != 12 {
		t.Errorf("the flag should override the environment: max sessions = %d", c.limits.MaxSessions)
	}
}

func TestParseServeConfigAgent(t *testing.T) {
	t.Setenv("APTL_CAPTURE_LAUNCH", "agent")
	t.Setenv("APTL_CAPTURE_AGENT_SOCKET", "/run/aptl/agent.sock")
	c, err := parseServeConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.launch != "agent" || c.agentSocket != "/run/aptl/agent.sock" || c.agentDial != 5*time.Second {
		t.Errorf("config = %+v", c)
	}
}

func TestParseServeConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
	}{
		{name: "listen without port", args: []string{"--listen", "127.0.0.1"}, wantErr: "--listen / APTL_CAPTURE_LISTEN"},
		{name: "listen bad port", args: []string{"--listen", "127.0.0.1:70000"}, wantErr: "port"},
		{name: "listen bad host", args: []string{"--listen", "bad host:22"}, wantErr: "not an IP address or host name"},
		{name: "env int", env: map[string]string{"APTL_CAPTURE_MAX_SESSIONS": "many"}, wantErr: "APTL_CAPTURE_MAX_SESSIONS: \"many\" is not a whole number"},
		{name: "env duration", env: map[string]string{"APTL_CAPTURE_LOGIN_GRACE": "30"}, wantErr: "APTL_CAPTURE_LOGIN_GRACE"},
		{name: "zero limit", args: []string{"--max-sessions", "0"}, wantErr: "--max-sessions / APTL_CAPTURE_MAX_SESSIONS: out of range"},
		{name: "bad user", env: map[string]string{"APTL_CAPTURE_USERS": "kali,r:oot"}, wantErr: `"r:oot" is not a valid login name`},
		{name: "no users", args: []string{"--users", " , "}, wantErr: "name at least one login user"},
		{name: "unknown adapter", env: map[string]string{"APTL_CAPTURE_LAUNCH": "docker"}, wantErr: `unknown adapter "docker"`},
		{name: "bad accept-env", args: []string{"--accept-env", "LANG,LD_*X"}, wantErr: "--accept-env"},
		{name: "bad log format", args: []string{"--log-format", "xml"}, wantErr: "--log-format"},
		{name: "empty root", args: []string{"--root", ""}, wantErr: "--root / APTL_CAPTURE_ROOT: must not be empty"},
		{name: "agent socket relative", env: map[string]string{"APTL_CAPTURE_LAUNCH": "agent", "APTL_CAPTURE_AGENT_SOCKET": "run/agent.sock"}, wantErr: "--agent-socket / APTL_CAPTURE_AGENT_SOCKET"},
		{name: "agent probe interval", args: []string{"--agent-probe-interval", "2h"}, wantErr: "--agent-probe-interval"},
		{name: "agent uid negative", args: []string{"--agent-uid", "-1"}, wantErr: "--agent-uid / APTL_CAPTURE_AGENT_UID"},
		{name: "insecure flag not a bool", env: map[string]string{"APTL_CAPTURE_INSECURE_AGENT_SAME_PIDNS": "maybe"}, wantErr: "APTL_CAPTURE_INSECURE_AGENT_SAME_PIDNS: \"maybe\" is not true or false"},
		{name: "bad sync", env: map[string]string{"APTL_CAPTURE_SYNC": "sometimes"}, wantErr: "--sync / APTL_CAPTURE_SYNC"},
		{name: "negative cap", args: []string{"--max-transcript-mb", "-1"}, wantErr: "--max-transcript-mb"},
		{name: "stray argument", args: []string{"extra"}, wantErr: `unexpected argument "extra"`},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := parseServeConfig(tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}
