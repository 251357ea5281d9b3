package tests

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
)

func TestAuthenticationRefusals(t *testing.T) {
	h := newHarness(t)
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	other, _ := gossh.NewSignerFromKey(otherPriv)
	tests := []struct {
		name string
		cfg  *gossh.ClientConfig
	}{
		{"unknown key", h.clientConfig(h.user, other)},
		{"wrong user", h.clientConfig("not-"+h.user, h.client)},
		{"password", &gossh.ClientConfig{User: h.user, Auth: []gossh.AuthMethod{gossh.Password("x")},
			HostKeyCallback: gossh.FixedHostKey(h.hostKey)}},
		{"keyboard-interactive", &gossh.ClientConfig{User: h.user, HostKeyCallback: gossh.FixedHostKey(h.hostKey),
			Auth: []gossh.AuthMethod{gossh.KeyboardInteractive(func(string, string, []string, []bool) ([]string, error) { return nil, nil })}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := gossh.Dial("tcp", h.addr, tt.cfg)
			if err == nil {
				c.Close()
				t.Fatal("authentication succeeded")
			}
			if !strings.Contains(err.Error(), "unable to authenticate") {
				t.Errorf("err = %v", err)
			}
		})
	}
	if entries, _ := os.ReadDir(h.root); len(entries) != 0 {
		t.Errorf("refused logins left records: %v", entries)
	}
}

func TestLoginGraceClosesSilentConnection(t *testing.T) {
	h := newHarness(t, withLimits(func(l *broker.Limits) { l.LoginGrace, l.PreauthEvictAfter = 300*time.Millisecond, 300*time.Millisecond }))
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	// The server sends its version line, then must hang up on a client that
	// never answers.
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("connection was not closed by the server: %v", err)
	}
}

func TestSessionLimits(t *testing.T) {
	h := newHarness(t, withLimits(func(l *broker.Limits) { l.MaxSessionsPerConn = 2 }))
	c := h.dial(t)
	for i := 0; i < 2; i++ {
		if _, err := c.NewSession(); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
	}
	_, err := c.NewSession()
	if err == nil || !strings.Contains(err.Error(), "per-connection session limit") {
		t.Fatalf("third session: err = %v, want the per-connection limit", err)
	}
}

// run executes command in a new exec session and returns stdout, stderr and
// the error from Run.
func run(t *testing.T, c *gossh.Client, env map[string]string, command string) (string, string, error) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var envErrs []error
	for k, v := range env {
		if err := s.Setenv(k, v); err != nil {
			envErrs = append(envErrs, err)
		}
	}
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	err = s.Run(command)
	return stdout.String(), stderr.String(), errors.Join(append(envErrs, err)...)
}

// rawResult is what a client saw of one exec session on a raw channel.
type rawResult struct {
	started        bool // the exec request was accepted
	stdout, stderr string
	status         int // -1 without exit-status
	signal         string
}

// rawExec runs command on a raw session channel, so that stderr the broker
// sends before refusing the request is seen too (x/crypto's Session only
// reads stderr once a command started).
func rawExec(t *testing.T, c *gossh.Client, env map[string]string, command string) rawResult {
	t.Helper()
	var vars []envVar
	for k, v := range env {
		vars = append(vars, envVar{k, v})
	}
	return rawExecEnv(t, c, vars, command)
}

// refused reports whether the session was refused as sshd refuses a
// nologin account: the request accepted, nothing run, exit-status 1.
func (r rawResult) refused() bool {
	return r.started && r.stdout == "" && r.status == 1
}

// envVar is one env request, for rawExecEnv's ordered list.
type envVar struct{ name, value string }

// rawExecEnv is rawExec with env requests sent in the given order.
func rawExecEnv(t *testing.T, c *gossh.Client, env []envVar, command string) rawResult {
	t.Helper()
	ch, reqs, err := c.OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	res := rawResult{status: -1}
	reqsDone := make(chan struct{})
	go func() {
		defer close(reqsDone)
		for r := range reqs {
			switch r.Type {
			case "exit-status":
				var m struct{ Status uint32 }
				if gossh.Unmarshal(r.Payload, &m) == nil {
					res.status = int(m.Status)
				}
			case "exit-signal":
				var m struct{ Signal string }
				gossh.Unmarshal(r.Payload, &m)
				res.signal = m.Signal
			}
			r.Reply(false, nil)
		}
	}()
	for _, e := range env {
		ch.SendRequest("env", true, gossh.Marshal(struct{ N, V string }{e.name, e.value}))
	}
	res.started, err = ch.SendRequest("exec", true, gossh.Marshal(struct{ C string }{command}))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	errDone := make(chan struct{})
	go func() {
		io.Copy(&stderr, ch.Stderr())
		close(errDone)
	}()
	io.Copy(&stdout, ch)
	<-errDone
	ch.Close()
	select {
	case <-reqsDone:
	case <-time.After(10 * time.Second):
		t.Fatal("channel requests never ended")
	}
	res.stdout, res.stderr = stdout.String(), stderr.String()
	return res
}

func TestSessionIDRules(t *testing.T) {
	h := newHarness(t)
	c := h.dial(t)

	t.Run("invalid id becomes anon", func(t *testing.T) {
		out, _, err := run(t, c, map[string]string{"APTL_SESSION_ID": "../escape"}, "echo ran")
		if out != "ran\n" {
			t.Fatalf("session did not run: %q %v", out, err)
		}
		if err == nil {
			t.Error("the invalid id's env request was accepted")
		}
		h.waitIdle(t)
		dirs, _ := filepath.Glob(filepath.Join(h.root, "_unbound", "anon-*"))
		if len(dirs) != 1 {
			t.Fatalf("anon records: %v", dirs)
		}
		if hdr := timingHeaders(t, dirs[0]); hdr["APTL_SESSION_ID_SUPPLIED"] != "invalid" {
			t.Errorf("record does not say the supplied id was invalid: %v", hdr)
		}
		if _, err := os.Stat(filepath.Join(h.root, "escape")); err == nil {
			t.Error("the invalid id escaped the run directory")
		}
	})
	t.Run("duplicate id refused", func(t *testing.T) {
		env := map[string]string{"APTL_SESSION_ID": "dup-1"}
		if _, _, err := run(t, c, env, "true"); err != nil {
			t.Fatal(err)
		}
		h.waitIdle(t)
		before, _ := os.ReadFile(filepath.Join(h.sessionDir("_unbound", "dup-1"), "pty", "typescript"))
		res := rawExec(t, c, env, "echo SHOULD_NOT_RUN")
		if !res.refused() || res.stdout != "" {
			t.Fatalf("duplicate session ran: %+v", res)
		}
		if !strings.Contains(res.stderr, "dup-1 was already recorded") {
			t.Errorf("stderr = %q, want a clear refusal", res.stderr)
		}
		after, _ := os.ReadFile(filepath.Join(h.sessionDir("_unbound", "dup-1"), "pty", "typescript"))
		if !bytes.Equal(before, after) {
			t.Error("the existing record was modified")
		}
	})
	t.Run("reserved run id refused", func(t *testing.T) {
		res := rawExec(t, c, map[string]string{"APTL_RUN_ID": "_audit", "APTL_SESSION_ID": "r1"}, "echo SHOULD_NOT_RUN")
		if !res.refused() || res.stdout != "" {
			t.Fatalf("session ran: %+v", res)
		}
		if !strings.Contains(res.stderr, `APTL_RUN_ID "_audit" is a reserved name`) {
			t.Errorf("stderr = %q", res.stderr)
		}
		if _, err := os.Stat(filepath.Join(h.root, "_audit")); err == nil {
			t.Error("a reserved run directory was created")
		}
	})
}

func TestEnvRefusals(t *testing.T) {
	h := newHarness(t, withLimits(func(l *broker.Limits) { l.MaxEnvRequests = 4 }))
	c := h.dial(t)
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Setenv("LANG", strings.Repeat("x", 5000)); err == nil {
		t.Error("oversized env value accepted")
	}
	if err := s.Setenv("LD_PRELOAD", "/tmp/x.so"); err == nil {
		t.Error("LD_PRELOAD accepted")
	}
	if err := s.Setenv("LC_CANARY", "v"); err != nil {
		t.Errorf("LC_* refused: %v", err)
	}
	if err := s.Setenv("TZ", "UTC"); err != nil {
		t.Errorf("TZ refused: %v", err)
	}
	if err := s.Setenv("LANG", "C"); err == nil {
		t.Error("env request past the limit accepted")
	}
	out, err := s.Output("echo \"[$LD_PRELOAD][$LC_CANARY][$TZ]\"")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "[][v][UTC]\n" {
		t.Errorf("env in session = %q", out)
	}
}

func TestRefusedRequestsAndChannels(t *testing.T) {
	h := newHarness(t)
	c := h.dial(t)
	if ln, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
		t.Error("remote port forwarding accepted")
	}
	if conn, err := c.Dial("tcp", h.addr); err == nil {
		conn.Close()
		t.Error("local port forwarding (direct-tcpip) accepted")
	}
	if ok, _, err := c.SendRequest("keepalive@openssh.com", true, nil); !ok || err != nil {
		t.Errorf("keepalive not answered: ok=%v err=%v", ok, err)
	}
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.RequestSubsystem("sftp"); err == nil {
		t.Error("sftp subsystem accepted")
	}
	for _, req := range []string{"auth-agent-req@openssh.com", "x11-req"} {
		if ok, err := s.SendRequest(req, true, nil); ok || err != nil {
			t.Errorf("%s: ok=%v err=%v, want a refusal", req, ok, err)
		}
	}
	if err := s.RequestPty("xterm", 99999, 80, nil); err == nil {
		t.Error("absurd window size accepted")
	}
	if err := s.RequestPty("xterm\x1b]0;x", 24, 80, nil); err == nil {
		t.Error("terminal name with control characters accepted")
	}
}

func TestSignals(t *testing.T) { testSignals(t) }

// testSignals is TestSignals with extra harness options (agent_suites_test.go runs it
// with the agent adapter).
func testSignals(t *testing.T, opts ...harnessOption) {
	h := newHarness(t, opts...)
	c := h.dial(t)
	ch, reqs, err := c.OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	exits := make(chan *gossh.Request, 4)
	go func() {
		for r := range reqs {
			exits <- r
		}
		close(exits)
	}()
	if ok, err := ch.SendRequest("exec", true, gossh.Marshal(struct{ C string }{"echo STARTED; sleep 30"})); !ok || err != nil {
		t.Fatalf("exec: %v %v", ok, err)
	}
	var out bytes.Buffer
	readUntil(t, ch, &out, "STARTED\n", 10*time.Second)
	if ok, _ := ch.SendRequest("signal", true, gossh.Marshal(struct{ S string }{"FOO"})); ok {
		t.Error("unknown signal name accepted")
	}
	if ok, _ := ch.SendRequest("signal", true, gossh.Marshal(struct{ S string }{"TERM"})); !ok {
		t.Fatal("TERM refused")
	}
	select {
	case r := <-exits:
		var msg struct {
			Signal     string
			CoreDumped bool
			Msg, Lang  string
		}
		if r == nil || r.Type != "exit-signal" || gossh.Unmarshal(r.Payload, &msg) != nil || msg.Signal != "TERM" {
			t.Fatalf("got %+v, want exit-signal TERM", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit-signal after TERM")
	}
}

func TestExitSignalFromShell(t *testing.T) { testExitSignalFromShell(t) }

// testExitSignalFromShell is TestExitSignalFromShell with extra harness options (agent_suites_test.go runs it
// with the agent adapter).
func testExitSignalFromShell(t *testing.T, opts ...harnessOption) {
	h := newHarness(t, opts...)
	c := h.dial(t)
	_, _, err := run(t, c, map[string]string{"APTL_SESSION_ID": "sig-1"}, "kill -TERM $$")
	var ee *gossh.ExitError
	if !errors.As(err, &ee) || ee.Signal() != "TERM" {
		t.Fatalf("err = %v, want exit-signal TERM", err)
	}
	h.waitIdle(t)
	hdr := timingHeaders(t, h.sessionDir("_unbound", "sig-1"))
	if hdr["APTL_EXIT_SIGNAL"] != "TERM" || hdr["EXIT_CODE"] != "143" {
		t.Errorf("record: signal %q exit %q, want TERM and 143", hdr["APTL_EXIT_SIGNAL"], hdr["EXIT_CODE"])
	}
}

func TestSecretsNeverLogged(t *testing.T) { testSecretsNeverLogged(t) }

// testSecretsNeverLogged is TestSecretsNeverLogged with extra harness options (agent_suites_test.go runs it
// with the agent adapter).
func testSecretsNeverLogged(t *testing.T, opts ...harnessOption) {
	h := newHarness(t, opts...)
	c := h.dial(t)
	const canary = "CANARY7f3a9"
	out, _, err := run(t, c, map[string]string{"LC_SECRET": canary, "NOT_ALLOWED": canary}, "echo "+canary+"; printf "+canary+" >&2")
	if !strings.Contains(out, canary) {
		t.Fatalf("command did not run: %q %v", out, err)
	}
	h.waitIdle(t)
	if strings.Contains(h.logs.String(), canary) {
		t.Errorf("server logs contain the canary")
	}
}

// TestRefusedSessionTakesNoMoreRequests pipelines requests behind a refused
// exec: a corrected run id and a second exec must not start anything.
func TestRefusedSessionTakesNoMoreRequests(t *testing.T) {
	h := newHarness(t)
	ch, reqs, err := h.dial(t).OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	go gossh.DiscardRequests(reqs)
	env := func(n, v string) []byte { return gossh.Marshal(struct{ N, V string }{n, v}) }
	exec := gossh.Marshal(struct{ C string }{"echo SHOULD_NOT_RUN"})
	for _, r := range []struct {
		typ     string
		payload []byte
	}{
		{"env", env("APTL_RUN_ID", "_audit")},
		{"exec", exec},
		{"env", env("APTL_RUN_ID", "okrun")},
		{"exec", exec},
	} {
		if _, err := ch.SendRequest(r.typ, false, r.payload); err != nil {
			break // the broker closed the refused channel
		}
	}
	out, _ := io.ReadAll(ch)
	h.waitIdle(t)
	if len(out) != 0 {
		t.Errorf("refused channel produced output %q", out)
	}
	if entries, _ := os.ReadDir(h.root); len(entries) != 0 {
		t.Errorf("a request after the refusal created records: %v", entries)
	}
}
