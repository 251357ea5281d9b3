package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/launchtest"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

// launchPTY launches spec on a fresh PTY and returns the process, the slave's
// path and the master's output.
func launchPTY(t *testing.T, l *Local, spec launch.Spec) (launch.Process, *os.File, string, *testutil.TermOutput) {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("no PTY available: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := pty.Setsize(master, &pty.Winsize{Rows: 24, Cols: 80}); err != nil {
		t.Fatal(err)
	}
	slaveName := slave.Name()
	spec.TTY = slave
	p, err := l.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) }) // no-op once reaped
	return p, master, slaveName, testutil.ReadMaster(master)
}

func TestLaunchPTY(t *testing.T) {
	l, _ := testLocal(t)
	p, _, slaveName, out := launchPTY(t, l, launch.Spec{
		User: "tester",
		Term: "xterm-256color",
		Command: `test -t 0 && echo STDIN_IS_TTY
stty size
( : </dev/tty ) && echo CTTY_OK
tty
echo "TERM=$TERM"
exit 7`,
	})
	// Launch returned: the server must hold no fd on the slave any more.
	if fds := testutil.FDsPointingAt(t, slaveName); len(fds) != 0 {
		t.Errorf("after Launch the test process still holds fds %v on %s", fds, slaveName)
	}
	if got := p.Identity().UID; got != os.Geteuid() {
		t.Errorf("Identity().UID = %d, want %d", got, os.Geteuid())
	}
	e := launchtest.WaitExit(t, p)
	text := out.All(t)
	for _, want := range []string{"STDIN_IS_TTY", "24 80", "CTTY_OK", slaveName, "TERM=xterm-256color"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q; output: %q", want, text)
		}
	}
	if e != (launch.Exit{Code: 7}) {
		t.Errorf("Exit = %+v, want code 7", e)
	}
}

func TestLaunchPTYKilledBySignal(t *testing.T) {
	l, _ := testLocal(t)
	p, _, _, _ := launchPTY(t, l, launch.Spec{User: "tester", Command: "kill -TERM $$"})
	e := launchtest.WaitExit(t, p)
	if e.Signal != syscall.SIGTERM || e.SignalName() != "TERM" {
		t.Fatalf("Exit = %+v (name %q), want Signal SIGTERM", e, e.SignalName())
	}
}

func TestProcessSignal(t *testing.T) {
	l, _ := testLocal(t)
	// cat runs as a child of sh, in its process group. Its copy of the input
	// line (after the terminal's own echo) proves it is running, not between
	// fork and exec, where sh would hold the interrupt until the child ends.
	p, master, _, out := launchPTY(t, l, launch.Spec{User: "tester", Command: "trap - INT; cat; echo NOT_REACHED"})
	if _, err := io.WriteString(master, "PING\n"); err != nil {
		t.Fatal(err)
	}
	out.Expect(t, "PING\r\nPING\r\n")
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	if e := launchtest.WaitExit(t, p); e.Signal != syscall.SIGINT {
		t.Fatalf("Exit = %+v, want Signal SIGINT", e)
	}
	if err := p.Signal(syscall.SIGINT); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Signal after Wait = %v, want os.ErrProcessDone", err)
	}
	p.Hangup() // after Wait: must neither panic nor signal anything
}

func TestProcessHangupInteractiveShell(t *testing.T) {
	l, _ := testLocal(t)
	p, master, _, out := launchPTY(t, l, launch.Spec{User: "tester", Term: "dumb"})
	// The echoed input reads RE""ADY; only the shell's output reads READY, so
	// seeing it proves the login shell is up and reading the terminal.
	if _, err := io.WriteString(master, "echo RE\"\"ADY\n"); err != nil {
		t.Fatal(err)
	}
	out.Expect(t, "READY\r\n")
	p.Hangup()
	// SIGHUP, not the SIGKILL escalation, must end a shell that does not ignore it.
	if e := launchtest.WaitExit(t, p); e.Signal != syscall.SIGHUP {
		t.Fatalf("Exit = %+v, want Signal SIGHUP", e)
	}
}

func TestProcessHangupEscalatesToKill(t *testing.T) {
	l, _ := testLocal(t)
	p, _, _, out := launchPTY(t, l, launch.Spec{User: "tester", Command: "trap '' HUP; echo READY; sleep 30"})
	out.Expect(t, "READY")
	start := time.Now()
	p.Hangup()
	p.Hangup() // idempotent
	e := launchtest.WaitExit(t, p)
	if e.Signal != syscall.SIGKILL {
		t.Fatalf("Exit = %+v, want Signal SIGKILL after the grace", e)
	}
	if d := time.Since(start); d < launch.HangupGrace {
		t.Fatalf("killed after %v, before the %v grace", d, launch.HangupGrace)
	}
}

// TestProcessSignalRacesWait runs Signal against Wait under -race: Signal must
// stop with os.ErrProcessDone once Wait has reaped, and never race on state.
func TestProcessSignalRacesWait(t *testing.T) {
	l, _ := testLocal(t)
	p, _, _, _ := launchPTY(t, l, launch.Spec{User: "tester", Command: "exit 0"})
	done := make(chan error, 1)
	go func() {
		for {
			// Signal 0 checks that the group exists without affecting it.
			if err := p.Signal(0); errors.Is(err, os.ErrProcessDone) {
				done <- nil
				return
			} else if err != nil && !errors.Is(err, syscall.ESRCH) {
				done <- err
				return
			}
		}
	}()
	if e := launchtest.WaitExit(t, p); e != (launch.Exit{}) {
		t.Errorf("Exit = %+v, want code 0", e)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Signal: %v", err)
		}
	case <-time.After(testutil.FailAfter):
		t.Fatal("Signal never reported os.ErrProcessDone after Wait")
	}
}

func TestLaunchPipes(t *testing.T) {
	l, _ := testLocal(t)
	spec, stdin, stdout, stderr := launchtest.PipeSpec(t, "tester", "cat; echo out; echo err >&2; exit 3")
	p, err := l.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) })
	outCh, errCh := testutil.ReadAllAsync(stdout), testutil.ReadAllAsync(stderr)
	if _, err := io.WriteString(stdin, "hello\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close() // cat ends only if EOF reaches the child
	gotOut, gotErr := testutil.RecvString(t, "stdout", outCh), testutil.RecvString(t, "stderr", errCh)
	if e := launchtest.WaitExit(t, p); e != (launch.Exit{Code: 3}) {
		t.Errorf("Exit = %+v, want code 3", e)
	}
	if gotOut != "hello\nout\n" {
		t.Errorf("stdout = %q, want %q", gotOut, "hello\nout\n")
	}
	if gotErr != "err\n" {
		t.Errorf("stderr = %q, want %q", gotErr, "err\n")
	}
}

func TestLaunchEnvNoLeak(t *testing.T) {
	t.Setenv(canaryEnv, "leaked")
	l, home := testLocal(t)
	spec, stdin, stdout, _ := launchtest.PipeSpec(t, "tester", "env; pwd")
	spec.Env = []string{"APTL_SESSION_ID=s-1"}
	stdin.Close()
	p, err := l.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) })
	got := testutil.RecvString(t, "stdout", testutil.ReadAllAsync(stdout))
	launchtest.WaitExit(t, p)
	if strings.Contains(got, canaryEnv) {
		t.Errorf("server env leaked into the child: output has %s", canaryEnv)
	}
	for _, want := range []string{"HOME=" + home, "USER=tester", "LOGNAME=tester", "SHELL=/bin/sh", "APTL_SESSION_ID=s-1", "\n" + home + "\n"} {
		if !strings.Contains("\n"+got, want) {
			t.Errorf("child output lacks %q; output: %q", want, got)
		}
	}
	if strings.Contains(got, "TERM=") {
		t.Errorf("TERM set without a PTY; output: %q", got)
	}
}

// TestLocalRunsAsLoginUser checks the credential switch. nobody's real shell is
// nologin, so the fixture keeps its uid and gid but gives it /bin/sh.
func TestLocalRunsAsLoginUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only a root server switches to the login user")
	}
	nobody, err := login.LookupPasswd(login.SystemPasswd, "nobody")
	if err != nil {
		t.Skipf("needs user nobody in %s: %v", login.SystemPasswd, err)
	}
	if nobody.UID == 0 {
		t.Skip("nobody is uid 0 here")
	}
	const extraGID = 4242
	l := New()
	l.passwdPath = testutil.WriteFixture(t, "passwd", fmt.Sprintf("nobody:x:%d:%d::/nonexistent:/bin/sh\n", nobody.UID, nobody.GID))
	l.groupPath = testutil.WriteFixture(t, "group", fmt.Sprintf("extra:x:%d:root,nobody\n", extraGID))
	spec, stdin, stdout, _ := launchtest.PipeSpec(t, "nobody", "id -u; id -g; id -G; pwd")
	stdin.Close()
	p, err := l.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) })
	got := testutil.RecvString(t, "stdout", testutil.ReadAllAsync(stdout))
	if e := launchtest.WaitExit(t, p); e != (launch.Exit{}) {
		t.Fatalf("Exit = %+v; output %q", e, got)
	}
	u, g := strconv.Itoa(nobody.UID), strconv.Itoa(nobody.GID)
	want := u + "\n" + g + "\n" + g + " " + strconv.Itoa(extraGID) + "\n/\n"
	if got != want {
		t.Errorf("id -u; id -g; id -G; pwd = %q, want %q", got, want)
	}
	id := p.Identity()
	if id.UID != nobody.UID || id.User != "nobody" || id.Note != "login user nobody" {
		t.Errorf("Identity = %+v", id)
	}
}
