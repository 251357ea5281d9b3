package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/agentclient"
	"github.com/aptl/aptl-kali-capture/launch/launchtest"
	"github.com/aptl/aptl-kali-capture/launch/local"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

// testAgent is an in-process agent server on a socket in a temp dir, with the
// "tester" fixture account, and an Agent adapter pointing at it.
type testAgent struct {
	srv   *Server
	agent *agentclient.Agent
	home  string
	logs  *testutil.LockedBuffer
	stop  func() // shuts the server down; also at the test's end
}

// newTestAgent starts a server that accepts this very process as its peer
// (same PID namespace: the insecure development mode). mutate may change
// the config before the server is built.
func newTestAgent(t testing.TB, mutate func(*Config)) *testAgent {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "agent.sock")
	ta := serveTestAgent(t, socket, mutate)
	var err error
	if ta.agent, err = agentclient.NewAgent(socket, agentclient.WithReplyTimeout(testutil.FailAfter), agentclient.WithAgentUID(os.Geteuid()), agentclient.InsecureAllowAgentInSamePIDNS()); err != nil {
		t.Fatal(err)
	}
	return ta
}

// serveTestAgent is newTestAgent's server alone, listening on socket until
// the test ends (or stop is called: ta.stop).
func serveTestAgent(t testing.TB, socket string, mutate func(*Config)) *testAgent {
	t.Helper()
	ta := &testAgent{home: t.TempDir(), logs: &testutil.LockedBuffer{}}
	cfg := Config{
		Users:                         []string{"tester"},
		AllowRoot:                     os.Geteuid() == 0, // tester is this process's uid
		InsecureAllowSamePIDNamespace: true,
		PeerUID:                       os.Geteuid(), // the in-process sidecar adapter
		PeerGID:                       os.Getegid(),
		Logger:                        slog.New(slog.NewJSONHandler(ta.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv.passwdPath = filepath.Join(dir, "passwd")
	srv.groupPath = filepath.Join(dir, "group")
	pw := fmt.Sprintf("tester:x:%d:%d::%s:/bin/sh\ntoor:x:0:0::/root:/bin/sh\n", os.Geteuid(), os.Getegid(), ta.home)
	if err := os.WriteFile(srv.passwdPath, []byte(pw), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(srv.groupPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(socket, os.Geteuid(), os.Getegid())
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	ta.stop = sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.FailAfter)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("agent shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	t.Cleanup(ta.stop)
	ta.srv = srv
	return ta
}

func TestAgentName(t *testing.T) {
	a, err := agentclient.NewAgent(agentwire.DefaultSocket)
	if err != nil || a.Name() != "agent" || a.Socket() != agentwire.DefaultSocket {
		t.Fatalf("NewAgent = %v, %v", a, err)
	}
}

func TestCheckConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"one user", Config{Users: []string{"kali"}}, true},
		{"no users", Config{}, false},
		{"root without AllowRoot", Config{Users: []string{"kali", "root"}}, false},
		{"root with AllowRoot", Config{Users: []string{"root"}, AllowRoot: true}, true},
		{"bad name", Config{Users: []string{"ka li"}}, false},
		{"leading dash", Config{Users: []string{"-kali"}}, false},
		{"negative limit", Config{Users: []string{"kali"}, MaxSessions: -1}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := checkConfig(tt.cfg); (err == nil) != tt.ok {
				t.Errorf("checkConfig = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestMayAcceptPeer(t *testing.T) {
	for _, tt := range []struct {
		name     string
		pid      int32
		insecure bool
		ok       bool
	}{
		{"peer outside the namespace", 0, false, true},
		{"peer inside the namespace", 42, false, false},
		{"peer inside, development flag", 42, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := mayAcceptPeer(tt.pid, tt.insecure); (err == nil) != tt.ok {
				t.Errorf("mayAcceptPeer = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestAgentResolve is the user policy: allow-list, the workload's passwd,
// uid 0 only with AllowRoot, and a non-root agent only as itself.
func TestAgentResolve(t *testing.T) {
	for _, tt := range []struct {
		name      string
		login     string
		allowRoot bool
		wantCode  string // "" means allowed
	}{
		{"allowed user", "tester", os.Geteuid() == 0, ""},
		{"not allow-listed", "daemon", true, agentwire.CodeNotAllowed},
		{"allow-listed, not in passwd", "ghost", true, agentwire.CodeNoUser},
		{"uid 0 alias without AllowRoot", "toor", false, agentwire.CodeNotAllowed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestAgent(t, func(c *Config) {
				c.Users = []string{"tester", "ghost", "toor"}
				c.AllowRoot = tt.allowRoot
			})
			_, err := ta.srv.resolve(tt.login)
			var we *agentwire.Error
			switch {
			case tt.wantCode == "" && err != nil:
				t.Fatalf("resolve: %v", err)
			case tt.wantCode != "" && (!errors.As(err, &we) || we.Code != tt.wantCode):
				t.Fatalf("resolve = %v, want code %s", err, tt.wantCode)
			}
		})
	}
}

func TestAgentLaunchPipes(t *testing.T) {
	ta := newTestAgent(t, nil)
	spec, stdin, stdout, stderr := launchtest.PipeSpec(t, "tester", "cat; echo out; echo err >&2; pwd; exit 3")
	p, err := ta.agent.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	outCh, errCh := testutil.ReadAllAsync(stdout), testutil.ReadAllAsync(stderr)
	if _, err := io.WriteString(stdin, "hello\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	gotOut, gotErr := testutil.RecvString(t, "stdout", outCh), testutil.RecvString(t, "stderr", errCh)
	if e := launchtest.WaitExit(t, p); e != (launch.Exit{Code: 3}) {
		t.Errorf("Exit = %+v, want code 3", e)
	}
	if want := "hello\nout\n" + ta.home + "\n"; gotOut != want || gotErr != "err\n" {
		t.Errorf("stdout %q stderr %q, want %q and %q", gotOut, gotErr, want, "err\n")
	}
	id := p.Identity()
	if id.User != "tester" || id.UID != os.Geteuid() || id.Shell != "/bin/sh" || id.Home != ta.home || !strings.Contains(id.Note, "workload") {
		t.Errorf("Identity = %+v", id)
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after Wait = %v, want ErrProcessDone", err)
	}
}

// TestAgentLaunchPTY runs a login shell on a slave that crossed the socket:
// it is the controlling terminal, the env is the login env, and the exit
// status comes back.
func TestAgentLaunchPTY(t *testing.T) {
	ta := newTestAgent(t, nil)
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("no PTY available: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	slaveName := slave.Name()
	out := testutil.ReadMaster(master)
	p, err := ta.agent.Launch(context.Background(), launch.Spec{User: "tester", Term: "xterm-test", Env: []string{"APTL_SESSION_ID=s-7"}, TTY: slave})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if fds := testutil.FDsPointingAt(t, slaveName); len(fds) != 0 {
		t.Errorf("after Launch this process (sidecar and agent) still holds the slave as fds %v", fds)
	}
	io.WriteString(master, "echo \"T=$TERM S=$APTL_SESSION_ID A=$0\"; echo CTTY > /dev/tty; exit 4\n")
	out.Expect(t, "T=xterm-test S=s-7 A=-sh")
	out.Expect(t, "CTTY\r\n")
	if e := launchtest.WaitExit(t, p); e != (launch.Exit{Code: 4}) {
		t.Errorf("Exit = %+v, want code 4", e)
	}
}

func TestAgentSignalAndHangup(t *testing.T) {
	ta := newTestAgent(t, nil)
	t.Run("signal", func(t *testing.T) {
		spec, stdin, stdout, _ := launchtest.PipeSpec(t, "tester", "echo STARTED; exec sleep 30")
		stdin.Close()
		p, err := ta.agent.Launch(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 8)
		if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != "STARTED\n" {
			t.Fatalf("read %q, %v", buf, err)
		}
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if e := launchtest.WaitExit(t, p); e.Signal != syscall.SIGTERM {
			t.Errorf("Exit = %+v, want SIGTERM", e)
		}
	})
	t.Run("hangup escalates to kill", func(t *testing.T) {
		spec, stdin, stdout, _ := launchtest.PipeSpec(t, "tester", "trap '' HUP; echo STARTED; sleep 30")
		stdin.Close()
		p, err := ta.agent.Launch(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 8)
		if _, err := io.ReadFull(stdout, buf); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		p.Hangup()
		p.Hangup() // only the first has an effect
		if e := launchtest.WaitExit(t, p); e.Signal != syscall.SIGKILL {
			t.Errorf("Exit = %+v, want SIGKILL after the grace", e)
		}
		if d := time.Since(start); d < launch.HangupGrace {
			t.Errorf("killed after %v, before the %v grace", d, launch.HangupGrace)
		}
	})
}

func TestAgentProbe(t *testing.T) {
	ta := newTestAgent(t, nil)
	if err := ta.agent.Probe(context.Background()); err != nil {
		t.Errorf("Probe: %v", err)
	}
	gone, err := agentclient.NewAgent(filepath.Join(t.TempDir(), "none.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Probe(context.Background()); !errors.Is(err, launch.ErrAgentUnreachable) {
		t.Errorf("Probe of a missing socket = %v, want launch.ErrAgentUnreachable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ta.agent.Probe(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Probe with a cancelled context = %v", err)
	}
}

// TestAgentRefusesSamePIDNamespace: without the development flag, a peer in
// the agent's PID namespace (this test process) is refused: its connection
// is closed without a reply, and the refused Launch leaves no fd behind.
func TestAgentRefusesSamePIDNamespace(t *testing.T) {
	ta := newTestAgent(t, func(c *Config) { c.InsecureAllowSamePIDNamespace = false })
	if err := ta.agent.Probe(context.Background()); err == nil {
		t.Errorf("Probe succeeded, want the connection closed")
	}
	base := testutil.OpenFDs(t)
	spec, stdin, stdout, stderr := launchtest.PipeSpec(t, "tester", "echo SHOULD_NOT_RUN")
	if _, err := ta.agent.Launch(context.Background(), spec); err == nil {
		t.Fatalf("Launch succeeded, want the connection closed")
	}
	stdin.Close()
	if got := testutil.RecvString(t, "stdout", testutil.ReadAllAsync(stdout)); got != "" {
		t.Errorf("refused session wrote %q", got)
	}
	stdout.Close()
	stderr.Close()
	testutil.WaitForFDs(t, base)
	if !strings.Contains(ta.logs.String(), "PID namespace") {
		t.Errorf("agent log does not say why it refused: %s", ta.logs.String())
	}
}

// TestAgentShutdownLosesSessions: an agent that stops reports an error
// instead of an exit, which the sidecar's Wait turns into ErrAgentLost.
func TestAgentShutdownLosesSessions(t *testing.T) {
	ta := newTestAgent(t, nil)
	spec, stdin, stdout, _ := launchtest.PipeSpec(t, "tester", "echo STARTED; exec sleep 30")
	stdin.Close()
	p, err := ta.agent.Launch(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(stdout, buf); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.FailAfter)
	defer cancel()
	if err := ta.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); !errors.Is(err, agentclient.ErrAgentLost) || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("Wait = %v, want ErrAgentLost (agent shutting down)", err)
	}
	if err := ta.agent.Probe(context.Background()); !errors.Is(err, launch.ErrAgentUnreachable) {
		t.Errorf("Probe after shutdown = %v, want launch.ErrAgentUnreachable", err)
	}
}

// TestAgentLogsNoSecrets: the agent's log holds neither the command nor env values.
func TestAgentLogsNoSecrets(t *testing.T) {
	const canary = "CANARY-agent-5e1f"
	ta := newTestAgent(t, nil)
	spec, stdin, stdout, _ := launchtest.PipeSpec(t, "tester", "echo "+canary)
	spec.Env = []string{"LC_SECRET=" + canary}
	stdin.Close()
	p, err := ta.agent.Launch(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.RecvString(t, "stdout", testutil.ReadAllAsync(stdout)); got != canary+"\n" {
		t.Fatalf("stdout %q", got)
	}
	launchtest.WaitExit(t, p)
	if logs := ta.logs.String(); strings.Contains(logs, canary) || !strings.Contains(logs, `"session exited"`) {
		t.Errorf("agent log has the canary, or no exit line: %s", logs)
	}
}

// TestServerRunsAsLoginUser checks the credential switch in the agent.
func TestServerRunsAsLoginUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only a root agent switches to the login user")
	}
	nobody, err := login.LookupPasswd(login.SystemPasswd, "nobody")
	if err != nil || nobody.UID == 0 {
		t.Skipf("needs a non-root user nobody in %s: %v", login.SystemPasswd, err)
	}
	ta := newTestAgent(t, func(c *Config) { c.Users = []string{"nobody"} })
	if err := os.WriteFile(ta.srv.passwdPath, fmt.Appendf(nil, "nobody:x:%d:%d::/nonexistent:/bin/sh\n", nobody.UID, nobody.GID), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ta.srv.groupPath, []byte("extra:x:4242:nobody\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec, stdin, stdout, _ := launchtest.PipeSpec(t, "nobody", "id -u; id -g; id -G; pwd")
	stdin.Close()
	p, err := ta.agent.Launch(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	got := testutil.RecvString(t, "stdout", testutil.ReadAllAsync(stdout))
	launchtest.WaitExit(t, p)
	u, g := strconv.Itoa(nobody.UID), strconv.Itoa(nobody.GID)
	if want := u + "\n" + g + "\n" + g + " 4242\n/\n"; got != want {
		t.Errorf("id -u; id -g; id -G; pwd = %q, want %q", got, want)
	}
}

// TestAgentSessionLimit: past MaxSessions the agent answers busy at once.
func TestAgentSessionLimit(t *testing.T) {
	ta := newTestAgent(t, func(c *Config) { c.MaxSessions = 1 })
	spec, stdin, stdout, _ := launchtest.PipeSpec(t, "tester", "echo STARTED; exec sleep 30")
	stdin.Close()
	p, err := ta.agent.Launch(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(stdout, buf); err != nil {
		t.Fatal(err)
	}
	spec2, _, _, _ := launchtest.PipeSpec(t, "tester", "echo SHOULD_NOT_RUN")
	if _, err := ta.agent.Launch(context.Background(), spec2); !errors.Is(err, agentclient.ErrAgentRefused) || !strings.Contains(err.Error(), agentwire.CodeBusy) {
		t.Errorf("second Launch = %v, want refused busy", err)
	}
	p.Hangup()
	if e := launchtest.WaitExit(t, p); e.Signal != syscall.SIGHUP {
		t.Errorf("Exit = %+v, want SIGHUP", e)
	}
}

func TestListenPath(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "agent.sock")
	ln, err := Listen(socket, os.Geteuid(), os.Getegid())
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, %v; want 0600", fi.Mode(), err)
	}
	if _, err := Listen(socket, os.Geteuid(), os.Getegid()); err == nil || !strings.Contains(err.Error(), "another agent listens") {
		t.Errorf("second listener = %v, want refused", err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // leaves a stale socket file, as a killed agent does
	ln, err = Listen(socket, os.Geteuid(), os.Getegid())
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	ln.Close()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(plain, os.Geteuid(), os.Getegid()); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("over a regular file = %v, want refused", err)
	}
}

// BenchmarkLaunchExec is one exec session without a PTY ("true"), from
// Launch to Wait, through each adapter; the agent is in-process, so the
// difference is the socket round trips and fd passing.
func BenchmarkLaunchExec(b *testing.B) {
	ta := newTestAgent(b, nil)
	local := local.NewWithAccountFiles(ta.srv.passwdPath, ta.srv.groupPath)
	for _, l := range []launch.Launcher{local, ta.agent} {
		b.Run(l.Name(), func(b *testing.B) {
			for b.Loop() {
				child, ours := benchPipes(b)
				p, err := l.Launch(context.Background(), launch.Spec{User: "tester", Command: "true", Stdin: child[0], Stdout: child[1], Stderr: child[2]})
				if err != nil {
					b.Fatal(err)
				}
				if e, err := p.Wait(); err != nil || e != (launch.Exit{}) {
					b.Fatalf("Wait = %+v, %v", e, err)
				}
				for _, f := range ours {
					f.Close()
				}
			}
		})
	}
}

func benchPipes(b *testing.B) (child, ours []*os.File) {
	for i := 0; i < 3; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			child, ours = append(child, r), append(ours, w)
		} else {
			child, ours = append(child, w), append(ours, r)
		}
	}
	return child, ours
}

// TestAgentPeerChecks: the sidecar refuses an agent socket answered by the
// wrong uid, or (without the development option) by a process in its own
// PID namespace, before it sends anything.
func TestAgentPeerChecks(t *testing.T) {
	ta := newTestAgent(t, nil)
	socket := ta.agent.Socket()
	for name, opts := range map[string][]agentclient.AgentOption{
		"same PID namespace": {agentclient.WithAgentUID(os.Geteuid())},
		"wrong uid":          {agentclient.WithAgentUID(os.Geteuid() + 1), agentclient.InsecureAllowAgentInSamePIDNS()},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := agentclient.NewAgent(socket, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Probe(context.Background()); !errors.Is(err, agentclient.ErrAgentUntrusted) {
				t.Fatalf("Probe = %v, want ErrAgentUntrusted", err)
			}
		})
	}
	if err := ta.agent.Probe(context.Background()); err != nil {
		t.Fatalf("the trusted configuration fails: %v", err)
	}
}
