//go:build linux

package main

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

func TestParseServeConfigDefaults(t *testing.T) {
	c, err := parseServeConfig(nil, testutil.MapLookup(nil))
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
	env := map[string]string{}
	env["APTL_CAPTURE_LISTEN"] = "0.0.0.0:22"
	env["APTL_CAPTURE_USERS"] = "kali, tools"
	env["APTL_CAPTURE_LOGIN_GRACE"] = "5s"
	env["APTL_CAPTURE_MAX_SESSIONS"] = "9"
	c, err := parseServeConfig([]string{"--max-sessions", "12", "--root", "/var/log/aptl/captures"}, testutil.MapLookup(env))
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
	env := map[string]string{}
	env["APTL_CAPTURE_LAUNCH"] = "agent"
	env["APTL_CAPTURE_AGENT_SOCKET"] = "/run/aptl/agent.sock"
	c, err := parseServeConfig(nil, testutil.MapLookup(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.launch != "agent" || c.agentSocket != "/run/aptl/agent.sock" || c.agentDial != 5*time.Second {
		t.Errorf("config = %+v", c)
	}
}

// TestParseServeConfigRanges: every numeric setting with a range names the
// value it got and the range it takes, on either side of it.
func TestParseServeConfigRanges(t *testing.T) {
	tests := []struct {
		flag, value, want string
	}{
		{"max-auth-tries", "0", "0: must be between 1 and 100"},
		{"max-auth-tries", "101", "101: must be between 1 and 100"},
		{"login-grace", "11m", "11m0s: must be between 1ms and 10m0s"},
		{"max-conns", "10001", "10001: must be between 1 and 10000"},
		{"max-sessions", "0", "0: must be between 1 and 10000"},
		{"max-sessions-per-conn", "1001", "1001: must be between 1 and 1000"},
		{"max-env", "0", "0: must be between 1 and 1000"},
		{"max-transcript-mb", "-1", "-1: must be between 0 and 1048576"},
		{"pcap-rotate-mb", "0", "0: must be between 1 and 1048576"},
		{"pcap-files", "0", "0: must be between 1 and 100000"},
		{"agent-dial-timeout", "2m", "2m0s: must be between 1ms and 1m0s"},
		{"agent-reply-timeout", "0s", "0s: must be between 1ms and 1m0s"},
		{"agent-probe-interval", "2h", "2h0m0s: must be between 1ms and 1m0s"},
		{"agent-uid", "-1", "-1: must be between 0 and 4294967294"},
		{"shutdown-grace", "0s", "0s: must be between 1ms and 1h0m0s"},
		{"port-taken-wait", "2h", "2h0m0s: must be between 0s and 1h0m0s"},
		{"client-alive-interval", "500ms", "500ms: must be 0 (off) or between 1s and 1h0m0s"},
		{"client-alive-count-max", "0", "0: must be between 1 and 100"},
	}
	for _, tt := range tests {
		t.Run(tt.flag+"="+tt.value, func(t *testing.T) {
			_, err := parseServeConfig([]string{"--" + tt.flag, tt.value}, testutil.MapLookup(nil))
			if err == nil || !strings.Contains(err.Error(), "--"+tt.flag+" / APTL_CAPTURE_") || !strings.HasSuffix(err.Error(), tt.want) {
				t.Fatalf("err = %v, want the flag and %q", err, tt.want)
			}
		})
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
		{name: "zero limit", args: []string{"--max-sessions", "0"}, wantErr: "--max-sessions / APTL_CAPTURE_MAX_SESSIONS: 0: must be between 1 and 10000"},
		{name: "bad user", env: map[string]string{"APTL_CAPTURE_USERS": "kali,r:oot"}, wantErr: `"r:oot" is not a valid login name`},
		{name: "no users", args: []string{"--users", " , "}, wantErr: "name at least one login user"},
		{name: "unknown adapter", env: map[string]string{"APTL_CAPTURE_LAUNCH": "docker"}, wantErr: `unknown adapter "docker"`},
		{name: "bad accept-env", args: []string{"--accept-env", "LANG,LD_*X"}, wantErr: "--accept-env"},
		{name: "accept-env the agent refuses", args: []string{"--launch", "agent", "--accept-env", "LANG,LD_PRELOAD"}, wantErr: `--accept-env / APTL_CAPTURE_ACCEPT_ENV: "LD_PRELOAD" names env the launch agent refuses`},
		{name: "accept-env prefix wider than the agent's", env: map[string]string{"APTL_CAPTURE_LAUNCH": "agent", "APTL_CAPTURE_ACCEPT_ENV": "L*"}, wantErr: `"L*" names env the launch agent refuses`},
		{name: "bad log format", args: []string{"--log-format", "xml"}, wantErr: "--log-format"},
		{name: "empty root", args: []string{"--root", ""}, wantErr: "--root / APTL_CAPTURE_ROOT: must not be empty"},
		{name: "agent socket relative", env: map[string]string{"APTL_CAPTURE_LAUNCH": "agent", "APTL_CAPTURE_AGENT_SOCKET": "run/agent.sock"}, wantErr: "--agent-socket / APTL_CAPTURE_AGENT_SOCKET"},
		{name: "agent probe interval", args: []string{"--agent-probe-interval", "2h"}, wantErr: "--agent-probe-interval"},
		{name: "agent uid negative", args: []string{"--agent-uid", "-1"}, wantErr: "--agent-uid / APTL_CAPTURE_AGENT_UID"},
		{name: "insecure flag not a bool", env: map[string]string{"APTL_CAPTURE_INSECURE_AGENT_SAME_PIDNS": "maybe"}, wantErr: "APTL_CAPTURE_INSECURE_AGENT_SAME_PIDNS: \"maybe\" is not true or false"},
		{name: "bad sync", env: map[string]string{"APTL_CAPTURE_SYNC": "sometimes"}, wantErr: "--sync / APTL_CAPTURE_SYNC"},
		{name: "negative cap", args: []string{"--max-transcript-mb", "-1"}, wantErr: "--max-transcript-mb"},
		{name: "unknown kex", args: []string{"--kex", "+diffie-hellman-group14-sha2"}, wantErr: `--kex / APTL_CAPTURE_KEX: unknown key exchange algorithm "diffie-hellman-group14-sha2"`},
		{name: "unknown cipher env", env: map[string]string{"APTL_CAPTURE_CIPHERS": "aes128-cbd"}, wantErr: `--ciphers / APTL_CAPTURE_CIPHERS: unknown cipher algorithm "aes128-cbd"`},
		{name: "no MAC left", env: map[string]string{"APTL_CAPTURE_MACS": "-hmac-sha2-*"}, wantErr: "--macs / APTL_CAPTURE_MACS: no MAC algorithm left"},
		{name: "empty kex env", env: map[string]string{"APTL_CAPTURE_KEX": ""}, wantErr: "--kex / APTL_CAPTURE_KEX: empty key exchange list"},
		{name: "stray argument", args: []string{"extra"}, wantErr: `unexpected argument "extra"`},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "flag provided but not defined"},
		// Pre-authentication limits (--max-startups, --per-source-max-startups).
		{name: "syntax", args: []string{"--max-startups", "10:30"}, wantErr: `--max-startups / APTL_CAPTURE_MAX_STARTUPS: "10:30" is not start:rate:full`},
		{name: "env syntax", env: map[string]string{"APTL_CAPTURE_MAX_STARTUPS": "many"}, wantErr: "--max-startups / APTL_CAPTURE_MAX_STARTUPS"},
		{name: "rate", args: []string{"--max-startups", "10:0:20"}, wantErr: "rate must be a percentage"},
		{name: "start above full", args: []string{"--max-startups", "30:30:20"}, wantErr: "start must not exceed full"},
		{name: "full not below max-conns", args: []string{"--max-startups", "16:30:64"}, wantErr: "--max-startups / APTL_CAPTURE_MAX_STARTUPS: full (64) must be below --max-conns (64)"},
		{name: "max-conns lowered under full", env: map[string]string{"APTL_CAPTURE_MAX_CONNS": "20"}, wantErr: "must be below --max-conns (20)"},
		{name: "per source above full", args: []string{"--per-source-max-startups", "33"}, wantErr: "--per-source-max-startups / APTL_CAPTURE_PER_SOURCE_MAX_STARTUPS: must be from 1 to --max-startups' full (32)"},
		{name: "per source zero", args: []string{"--per-source-max-startups", "0"}, wantErr: "--per-source-max-startups"},
		{name: "per source env", env: map[string]string{"APTL_CAPTURE_PER_SOURCE_MAX_STARTUPS": "eight"}, wantErr: `APTL_CAPTURE_PER_SOURCE_MAX_STARTUPS: "eight" is not a whole number`},
		{name: "evict after past the grace", args: []string{"--preauth-evict-after", "11s"}, wantErr: "--preauth-evict-after / APTL_CAPTURE_PREAUTH_EVICT_AFTER: 11s: must be from 1ms to --login-grace (10s)"},
		{name: "evict after zero", args: []string{"--preauth-evict-after", "0"}, wantErr: "--preauth-evict-after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseServeConfig(tt.args, testutil.MapLookup(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseServeConfigAlgorithms(t *testing.T) {
	c, err := parseServeConfig(nil, testutil.MapLookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	def := broker.DefaultAlgorithms()
	if !slices.Equal(c.algorithms.KeyExchanges, def.KeyExchanges) || !slices.Equal(c.algorithms.Ciphers, def.Ciphers) ||
		!slices.Equal(c.algorithms.MACs, def.MACs) {
		t.Errorf("default algorithms = %+v, want %+v", c.algorithms, def)
	}

	// A lab with an older client: the environment adds, the flag wins.
	env := map[string]string{}
	env["APTL_CAPTURE_KEX"] = "+diffie-hellman-group14-sha1"
	env["APTL_CAPTURE_MACS"] = "+hmac-sha1"
	c, err = parseServeConfig([]string{"--macs", "^hmac-sha2-512-etm@openssh.com", "--ciphers", "-aes192-ctr"}, testutil.MapLookup(env))
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(def.KeyExchanges), "diffie-hellman-group14-sha1"); !slices.Equal(c.algorithms.KeyExchanges, want) {
		t.Errorf("kex = %q, want %q", c.algorithms.KeyExchanges, want)
	}
	if want := []string{"hmac-sha2-512-etm@openssh.com", "hmac-sha2-256-etm@openssh.com"}; !slices.Equal(c.algorithms.MACs, want) {
		t.Errorf("macs = %q, want %q (the flag overrides the environment)", c.algorithms.MACs, want)
	}
	if slices.Contains(c.algorithms.Ciphers, "aes192-ctr") || len(c.algorithms.Ciphers) != len(def.Ciphers)-1 {
		t.Errorf("ciphers = %q", c.algorithms.Ciphers)
	}
}

func TestServeCheckPrintsEffectiveSettings(t *testing.T) {
	c, err := parseServeConfig([]string{"--check", "--kex", "curve25519-sha256", "--macs", "+hmac-sha1", "--state-dir", "/var/lib/aptl"}, testutil.MapLookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !c.checkOnly {
		t.Fatal("--check not set")
	}
	var out, warn strings.Builder
	printSettings(&out, &warn, c)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, want := range []string{
		// The library adds the @libssh.org alias of curve25519-sha256;
		// --check shows what is offered, not what was typed.
		"kex curve25519-sha256,curve25519-sha256@libssh.org",
		"ciphers " + strings.Join(broker.DefaultAlgorithms().Ciphers, ","),
		"macs hmac-sha2-256-etm@openssh.com,hmac-sha2-512-etm@openssh.com,hmac-sha1",
		"authorized-keys /var/lib/aptl/authorized_keys",
		"listen " + defaultListen,
		"max-auth-tries 6",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("--check output lacks %q:\n%s", want, out.String())
		}
	}
	for _, l := range lines {
		if name, _, ok := strings.Cut(l, " "); !ok || name == "check" || strings.HasPrefix(name, "-") {
			t.Errorf("line %q is not `name value`", l)
		}
	}
	if warn.String() != "" {
		t.Errorf("hmac-sha1 is not in x/crypto's insecure list, yet warned: %q", warn.String())
	}
	c, err = parseServeConfig([]string{"--check", "--kex", "+diffie-hellman-group14-sha1"}, testutil.MapLookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	warn.Reset()
	printSettings(&out, &warn, c)
	if !strings.Contains(warn.String(), "insecure algorithms enabled: diffie-hellman-group14-sha1") {
		t.Errorf("no warning for diffie-hellman-group14-sha1: %q", warn.String())
	}
	if code := runServe([]string{"--check", "--kex", "+diffie-hellman-group14-sha2"}); code != exitUsage {
		t.Errorf("--check with an unknown algorithm exited %d, want %d", code, exitUsage)
	}
}

func TestParseServeConfigPreauth(t *testing.T) {
	c, err := parseServeConfig(nil, testutil.MapLookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := broker.MaxStartups{Start: 16, Rate: 30, Full: 32}
	if c.limits.MaxStartups != want || c.limits.PerSourceMaxStartups != 8 || c.limits.LoginGrace != 10*time.Second || c.limits.PreauthEvictAfter != 2*time.Second {
		t.Errorf("defaults: max startups %v, per source %d, login grace %v, evict after %v; want %v, 8, 10s, 2s",
			c.limits.MaxStartups, c.limits.PerSourceMaxStartups, c.limits.LoginGrace, c.limits.PreauthEvictAfter, want)
	}

	env := map[string]string{}
	env["APTL_CAPTURE_MAX_STARTUPS"] = "10:50:40"
	env["APTL_CAPTURE_PER_SOURCE_MAX_STARTUPS"] = "3"
	c, err = parseServeConfig([]string{"--max-startups", "12"}, testutil.MapLookup(env))
	if err != nil {
		t.Fatal(err)
	}
	if want := (broker.MaxStartups{Start: 12, Rate: 100, Full: 12}); c.limits.MaxStartups != want || c.limits.PerSourceMaxStartups != 3 {
		t.Errorf("env and flag: max startups %v (want the flag's %v), per source %d (want the env's 3)",
			c.limits.MaxStartups, want, c.limits.PerSourceMaxStartups)
	}
}

// TestParseServeConfigLogLevel: serve has --log-level, as aptl-launch-agent
// has, with its environment variable and an error naming both.
func TestParseServeConfigLogLevel(t *testing.T) {
	c, err := parseServeConfig([]string{"--log-level", "debug"}, testutil.MapLookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.logLevel != slog.LevelDebug {
		t.Errorf("log level = %v, want debug", c.logLevel)
	}
	_, err = parseServeConfig(nil, testutil.MapLookup(map[string]string{"APTL_CAPTURE_LOG_LEVEL": "loud"}))
	if want := `--log-level / APTL_CAPTURE_LOG_LEVEL: "loud" is not debug, info, warn or error`; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

// TestShellQuote: the printed ssh command survives paths with spaces and
// quotes when pasted into a shell.
func TestShellQuote(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/home/you/aptl-dev/state/client_ed25519", "/home/you/aptl-dev/state/client_ed25519"},
		{"/home/you/My Labs/client", "'/home/you/My Labs/client'"},
		{"it's", `'it'\''s'`},
	} {
		if got := shellQuote(tt.in); got != tt.want {
			t.Errorf("shellQuote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestUnknownCaptureEnv: a misspelt APTL_CAPTURE_* name is reported by
// name; real settings and other prefixes are not.
func TestUnknownCaptureEnv(t *testing.T) {
	e := cliconfig.New("serve", testutil.MapLookup(nil), io.Discard)
	var s string
	e.String(&s, "listen", "APTL_CAPTURE_LISTEN", "", "x")
	got := unknownCaptureEnv(e.FlagSet, []string{"APTL_CAPTURE_LISTN=1", "APTL_CAPTURE_LISTEN=x", "APTL_RUN_ID=r", "APTL_CAPTURE_HOSTKEY_HOST=h"})
	if len(got) != 1 || got[0] != "APTL_CAPTURE_LISTN" {
		t.Errorf("unknown = %v, want [APTL_CAPTURE_LISTN]", got)
	}
}
