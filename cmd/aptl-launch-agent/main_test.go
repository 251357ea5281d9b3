package main

import (
	"bytes"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

func TestParseConfig(t *testing.T) {
	for _, tt := range []struct {
		name    string
		env     map[string]string
		args    []string
		want    *config
		wantErr string
	}{
		{name: "defaults", want: &config{socket: "@aptl-launch-agent", users: []string{"kali"}, maxSessions: 64, logFormat: "json", logLevel: slog.LevelInfo}},
		{name: "environment", env: map[string]string{
			"APTL_LAUNCH_AGENT_SOCKET": "/run/aptl/agent.sock", "APTL_LAUNCH_AGENT_USERS": "kali, root",
			"APTL_LAUNCH_AGENT_ALLOW_ROOT": "true", "APTL_LAUNCH_AGENT_MAX_SESSIONS": "8", "APTL_LAUNCH_AGENT_LOG_LEVEL": "debug",
		}, want: &config{socket: "/run/aptl/agent.sock", users: []string{"kali", "root"}, allowRoot: true, maxSessions: 8, logFormat: "json", logLevel: slog.LevelDebug}},
		{name: "flag wins over environment", env: map[string]string{"APTL_LAUNCH_AGENT_USERS": "kali"},
			args: []string{"-users", "tester", "-insecure-allow-same-pidns"},
			want: &config{socket: "@aptl-launch-agent", users: []string{"tester"}, insecureAllowSamePIDNS: true, maxSessions: 64, logFormat: "json", logLevel: slog.LevelInfo}},
		{name: "sidecar credentials", env: map[string]string{"APTL_LAUNCH_AGENT_PEER_UID": "10001"}, args: []string{"-peer-gid", "10002"},
			want: &config{socket: "@aptl-launch-agent", users: []string{"kali"}, peerUID: 10001, peerGID: 10002, maxSessions: 64, logFormat: "json", logLevel: slog.LevelInfo}},
		{name: "negative peer uid", args: []string{"-peer-uid", "-1"}, wantErr: `--peer-uid / APTL_LAUNCH_AGENT_PEER_UID: "-1" is not a number from 0 to 4294967294`},
		{name: "peer uid no id", args: []string{"-peer-uid", "4294967295"}, wantErr: "APTL_LAUNCH_AGENT_PEER_UID"},
		{name: "peer gid a name", env: map[string]string{"APTL_LAUNCH_AGENT_PEER_GID": "root"}, wantErr: `--peer-gid / APTL_LAUNCH_AGENT_PEER_GID: "root" is not a number`},
		{name: "relative socket", args: []string{"-socket", "agent.sock"}, wantErr: "APTL_LAUNCH_AGENT_SOCKET: agentwire: agent socket must be an absolute path or @name"},
		{name: "bad bool in env", env: map[string]string{"APTL_LAUNCH_AGENT_ALLOW_ROOT": "yes please"}, wantErr: `APTL_LAUNCH_AGENT_ALLOW_ROOT: "yes please" is not true or false`},
		{name: "max sessions zero", args: []string{"-max-sessions", "0"}, wantErr: "not a number from 1 to 10000"},
		{name: "bad log level", args: []string{"-log-level", "loud"}, wantErr: `"loud" is not debug`},
		{name: "log format from env", env: map[string]string{"APTL_LAUNCH_AGENT_LOG_FORMAT": "text"},
			want: &config{socket: "@aptl-launch-agent", users: []string{"kali"}, maxSessions: 64, logFormat: "text", logLevel: slog.LevelInfo}},
		{name: "bad log format", args: []string{"-log-format", "xml"}, wantErr: `--log-format / APTL_LAUNCH_AGENT_LOG_FORMAT: "xml" is neither text nor json`},
		{name: "stray argument", args: []string{"serve"}, wantErr: `unexpected argument "serve"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseConfig(tt.args, testutil.MapLookup(tt.env), io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseConfig = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("config = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRunRefusesRootWithoutAllowRoot(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"-users", "kali,root", "-socket", "@aptl-test-never-listens"}, testutil.MapLookup(nil), io.Discard, &stderr); code != exitUsage {
		t.Errorf("exit code = %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr.String(), "root is allowed only with AllowRoot") {
		t.Errorf("stderr = %q", stderr.String())
	}
}

// TestRunHelp: -h prints the usage with every setting's environment
// variable on stdout and exits 0.
func TestRunHelp(t *testing.T) {
	var stdout bytes.Buffer
	usage := func(s string) bool {
		for _, env := range []string{"APTL_LAUNCH_AGENT_SOCKET", "APTL_LAUNCH_AGENT_PEER_UID", "APTL_LAUNCH_AGENT_PEER_GID"} {
			if !strings.Contains(s, env) {
				return false
			}
		}
		return true
	}
	if code := run([]string{"-h"}, testutil.MapLookup(nil), &stdout, io.Discard); code != exitOK || !usage(stdout.String()) ||
		!strings.HasPrefix(stdout.String(), "usage: aptl-launch-agent [flags]\n") {
		t.Errorf("exit %d, usage %q", code, stdout.String())
	}
}

// TestRunUsageErrorExitCode: a usage error exits 2, as aptl-kali-capture's
// do (cliconfig.ExitUsage), and the message names the flag.
func TestRunUsageErrorExitCode(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"-max-sessions", "0"}, testutil.MapLookup(nil), io.Discard, &stderr); code != 2 {
		t.Errorf("exit code = %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "--max-sessions / APTL_LAUNCH_AGENT_MAX_SESSIONS") {
		t.Errorf("stderr = %q", stderr.String())
	}
}
