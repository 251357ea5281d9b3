// Package tests holds the end-to-end suites: an in-process broker with the
// local launch adapter, driven by real SSH clients (x/crypto/ssh, OpenSSH,
// paramiko, asyncssh) and checked with the real script(1) tools.
package tests

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/local"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

// slowTests is set by .ci/run: suites that take tens of seconds (the 10 s
// stalled client, 500 sequential sessions) run in full only then, and in a
// reduced form otherwise, so `go test ./...` stays quick to run often.
var slowTests = os.Getenv("APTL_CAPTURE_SLOW_TESTS") == "1"

// harness is one in-process broker on 127.0.0.1:0 with its own capture root,
// host key and client key. It is torn down by tb.Cleanup.
type harness struct {
	srv       *broker.Server
	addr      string
	root      string
	stateDir  string
	user      string
	client    gossh.Signer
	clientKey string // path of the client's private key, for OpenSSH
	hostKey   gossh.PublicKey
	logs      *testutil.LockedBuffer
	adapter   string // the launcher's Name(), as the record's APTL_ADAPTER
}

type harnessOption func(*broker.Config)

func withLimits(f func(*broker.Limits)) harnessOption {
	return func(c *broker.Config) { f(&c.Limits) }
}

// withCaptureRoot records under root instead of a fresh temporary folder.
func withCaptureRoot(root string) harnessOption {
	return func(c *broker.Config) { c.CaptureRoot = root }
}

// withLauncherFrom starts sessions with the adapter newLauncher builds
// instead of the local one (agent_suites_test.go runs client suites with the
// agent adapter this way).
func withLauncherFrom(newLauncher func() launch.Launcher) harnessOption {
	return func(c *broker.Config) { c.Launcher = newLauncher() }
}

// withLauncher wraps the local adapter, for tests of launcher failures.
func withLauncher(wrap func(launch.Launcher) launch.Launcher) harnessOption {
	return func(c *broker.Config) { c.Launcher = wrap(c.Launcher) }
}

func newHarness(tb testing.TB, opts ...harnessOption) *harness {
	tb.Helper()
	dir := tb.TempDir()
	h := &harness{root: filepath.Join(dir, "captures"), stateDir: filepath.Join(dir, "state"), logs: &testutil.LockedBuffer{}}
	u, err := user.Current()
	if err != nil {
		tb.Fatalf("current user: %v", err)
	}
	h.user = u.Username
	hostKey, err := broker.LoadOrCreateKey(filepath.Join(h.stateDir, broker.HostKeyFile), "test host")
	if err != nil {
		tb.Fatal(err)
	}
	h.hostKey = hostKey.PublicKey()
	h.clientKey = filepath.Join(h.stateDir, "client")
	if h.client, err = broker.LoadOrCreateKey(h.clientKey, "test client"); err != nil {
		tb.Fatal(err)
	}
	akPath := filepath.Join(h.stateDir, "authorized_keys")
	if err := os.WriteFile(akPath, gossh.MarshalAuthorizedKey(h.client.PublicKey()), 0o600); err != nil {
		tb.Fatal(err)
	}
	ak, err := broker.LoadAuthorizedKeys(akPath)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := broker.Config{
		HostKey:        hostKey,
		AuthorizedKeys: ak,
		Users:          []string{h.user},
		Launcher:       testLocalLauncher(tb, h.user),
		CaptureRoot:    h.root,
		AcceptEnv:      broker.DefaultAcceptEnv,
		Limits:         broker.DefaultLimits(),
		Logger:         slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, o := range opts {
		o(&cfg)
	}
	h.root, h.adapter = cfg.CaptureRoot, cfg.Launcher.Name()
	h.srv, err = broker.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := broker.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	h.addr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(ln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.srv.Shutdown(ctx); err != nil {
			tb.Errorf("shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, broker.ErrServerClosed) {
			tb.Errorf("serve returned %v", err)
		}
	})
	return h
}

// testLocalLauncher is the local adapter with the system's accounts, but
// user's home replaced by an empty folder of the test's: the suites must
// not depend on the machine's dotfiles. On the development machines root's
// .bashrc runs `pyenv init`, whose rehash holds a lock file while it runs;
// a test that hangs a shell up at once (ssh2's shell.end(), the hangup
// suites) could kill it mid-rehash and leave the lock behind, after which
// every root login waited 60 s for it and every later PTY test timed out.
func testLocalLauncher(tb testing.TB, user string) *local.Local {
	tb.Helper()
	return local.NewWithAccountFiles(testPasswd(tb, user), login.SystemGroup)
}

// testPasswd writes a copy of the system's passwd in which user's home is
// an empty folder of the test's, and returns its path.
func testPasswd(tb testing.TB, user string) string {
	tb.Helper()
	system, err := os.ReadFile(login.SystemPasswd)
	if err != nil {
		tb.Fatalf("read the system's passwd: %v", err)
	}
	home := tb.TempDir()
	lines := strings.SplitAfter(string(system), "\n")
	found := false
	for i, line := range lines {
		f := strings.Split(strings.TrimSuffix(line, "\n"), ":")
		if len(f) == 7 && f[0] == user {
			f[5] = home
			lines[i] = strings.Join(f, ":") + "\n"
			found = true
		}
	}
	if !found {
		tb.Fatalf("user %s has no entry in %s", user, login.SystemPasswd)
	}
	passwd := filepath.Join(tb.TempDir(), "passwd")
	if err := os.WriteFile(passwd, []byte(strings.Join(lines, "")), 0o600); err != nil {
		tb.Fatal(err)
	}
	return passwd
}

func (h *harness) clientConfig(user string, signer gossh.Signer) *gossh.ClientConfig {
	return &gossh.ClientConfig{
		User:            user,
		Auth:            []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.FixedHostKey(h.hostKey),
		Timeout:         10 * time.Second,
	}
}

// dial connects with the harness's client key as the allowed user.
func (h *harness) dial(tb testing.TB) *gossh.Client {
	tb.Helper()
	c, err := gossh.Dial("tcp", h.addr, h.clientConfig(h.user, h.client))
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func (h *harness) sessionDir(run, session string) string {
	return filepath.Join(h.root, run, session)
}

// waitIdle waits until the broker has finalized every session: records are
// complete only then.
func (h *harness) waitIdle(tb testing.TB) {
	tb.Helper()
	waitFor(tb, 15*time.Second, "all sessions finalized", func() bool { return h.srv.ActiveSessions() == 0 })
}

// execScript writes an sh script at path that runs prelude (sh lines, or
// nothing), then execs argv with the script's own arguments after it, so
// the program keeps the script's pid, and returns path. Each word of argv
// is single-quoted; a test whose paths hold a quote skips.
func execScript(t *testing.T, path, prelude string, argv ...string) string {
	t.Helper()
	quoted := make([]string, len(argv))
	for i, a := range argv {
		if strings.Contains(a, "'") {
			t.Skipf("%q cannot be single-quoted for sh", a)
		}
		quoted[i] = "'" + a + "'"
	}
	body := "#!/bin/sh\n" + prelude + "exec " + strings.Join(quoted, " ") + ` "$@"` + "\n"
	if err := os.WriteFile(path, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitFor polls cond until it holds or the timeout passes. It is for
// conditions with no event to wait on (another process's state).
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// replay runs the real scriptreplay on a session's record and returns one
// stream. scriptreplay always ends its output with one "\n" of its own,
// which is removed here; --cr-mode never stops it from turning recorded
// input CRs into LFs for display, so the bytes are compared as recorded.
func replay(tb testing.TB, dir, stream string) []byte {
	tb.Helper()
	bin, err := exec.LookPath("scriptreplay")
	if err != nil {
		skipClient(tb, "scriptreplay", "scriptreplay (util-linux, Debian bsdutils) not installed")
	}
	cmd := exec.Command(bin, "-T", filepath.Join(dir, "pty", "timing"), "-B", filepath.Join(dir, "pty", "typescript"),
		"--stream", stream, "--cr-mode", "never", "-m", "0.0001") // -m 0 would mean no maximum: real time
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("scriptreplay --stream %s: %v: %s", stream, err, stderr.String())
	}
	trimmed, ok := bytes.CutSuffix(out, []byte("\n"))
	if !ok {
		tb.Fatalf("scriptreplay output lacks its trailing newline")
	}
	return trimmed
}

// timingHeaders returns the H lines of a session's timing file as NAME → VALUE.
func timingHeaders(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "pty", "timing"))
	if err != nil {
		tb.Fatal(err)
	}
	h := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) == 4 && f[0] == "H" {
			h[f[2]] = f[3]
		}
	}
	return h
}

// readUntil reads from r until buf contains want, or fails the test after
// the timeout. It returns everything read.
func readUntil(tb testing.TB, r interface{ Read([]byte) (int, error) }, acc *bytes.Buffer, want string, timeout time.Duration) {
	tb.Helper()
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 32<<10)
		for !bytes.Contains(acc.Bytes(), []byte(want)) {
			n, err := r.Read(buf)
			acc.Write(buf[:n])
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			tb.Fatalf("read ended (%v) before %q appeared", err, want)
		}
	case <-time.After(timeout):
		tb.Fatalf("timed out waiting for %q", want)
	}
}

// catSession is an exec session of cat on c with env set: say writes a
// line and waits until cat echoed it back, so the line is in the
// transcript; end closes its input and waits for its exit.
type catSession struct {
	t      *testing.T
	sess   *gossh.Session
	stdin  io.WriteCloser
	stdout io.Reader
	echoed bytes.Buffer
}

func startCat(t *testing.T, c *gossh.Client, env map[string]string) *catSession {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range env {
		if err := sess.Setenv(k, v); err != nil {
			t.Fatal(err)
		}
	}
	cs := &catSession{t: t, sess: sess}
	cs.stdin, _ = sess.StdinPipe()
	cs.stdout, _ = sess.StdoutPipe()
	if err := sess.Start("cat"); err != nil {
		t.Fatal(err)
	}
	return cs
}

func (cs *catSession) say(line string) {
	cs.t.Helper()
	if _, err := io.WriteString(cs.stdin, line+"\n"); err != nil {
		cs.t.Fatal(err)
	}
	readUntil(cs.t, cs.stdout, &cs.echoed, line+"\n", 10*time.Second)
}

func (cs *catSession) end() error {
	cs.stdin.Close()
	return cs.sess.Wait()
}
