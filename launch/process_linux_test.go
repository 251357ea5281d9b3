package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// failAfter bounds how long a test waits for a child before failing; it is a
// failure deadline, never a way to let something happen.
const failAfter = 15 * time.Second

// termOutput collects what the child writes to the PTY, read from the master
// by one goroutine that reports chunks and closes ch at EOF/EIO.
type termOutput struct {
	ch  chan []byte
	buf bytes.Buffer // touched only by the test goroutine
}

func readMaster(master *os.File) *termOutput {
	o := &termOutput{ch: make(chan []byte, 16)}
	go func() {
		defer close(o.ch)
		for {
			b := make([]byte, 4096)
			n, err := master.Read(b)
			if n > 0 {
				o.ch <- b[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	return o
}

// expect reads until the output contains s.
func (o *termOutput) expect(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(failAfter)
	for !strings.Contains(o.buf.String(), s) {
		select {
		case b, ok := <-o.ch:
			if !ok {
				t.Fatalf("terminal closed before %q appeared; output: %q", s, o.buf.String())
			}
			o.buf.Write(b)
		case <-timeout:
			t.Fatalf("timed out waiting for %q; output: %q", s, o.buf.String())
		}
	}
}

// all reads until the slave side is closed by every holder (EIO on the master).
func (o *termOutput) all(t *testing.T) string {
	t.Helper()
	timeout := time.After(failAfter)
	for {
		select {
		case b, ok := <-o.ch:
			if !ok {
				return o.buf.String()
			}
			o.buf.Write(b)
		case <-timeout:
			t.Fatalf("terminal not closed; output so far: %q", o.buf.String())
		}
	}
}

// launchPTY launches spec on a fresh PTY and returns the process, the slave's
// path and the master's output.
func launchPTY(t *testing.T, l *Local, spec Spec) (Process, *os.File, string, *termOutput) {
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
	return p, master, slaveName, readMaster(master)
}

// waitExit calls Wait, failing the test if the process does not exit in time.
func waitExit(t *testing.T, p Process) Exit {
	t.Helper()
	type result struct {
		e   Exit
		err error
	}
	ch := make(chan result, 1)
	go func() {
		e, err := p.Wait()
		ch <- result{e, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Wait: %v", r.err)
		}
		return r.e
	case <-time.After(failAfter):
		_ = p.Signal(syscall.SIGKILL)
		t.Fatal("process did not exit")
		return Exit{}
	}
}

// fdsPointingAt lists this process's fds whose target is path.
func fdsPointingAt(t *testing.T, path string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == path {
			fds = append(fds, e.Name())
		}
	}
	return fds
}

func TestLaunchPTY(t *testing.T) {
	l, _ := testLocal(t)
	p, _, slaveName, out := launchPTY(t, l, Spec{
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
	if fds := fdsPointingAt(t, slaveName); len(fds) != 0 {
		t.Errorf("after Launch the test process still holds fds %v on %s", fds, slaveName)
	}
	if got := p.Identity().UID; got != os.Geteuid() {
		t.Errorf("Identity().UID = %d, want %d", got, os.Geteuid())
	}
	e := waitExit(t, p)
	text := out.all(t)
	for _, want := range []string{"STDIN_IS_TTY", "24 80", "CTTY_OK", slaveName, "TERM=xterm-256color"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q; output: %q", want, text)
		}
	}
	if e != (Exit{Code: 7}) {
		t.Errorf("Exit = %+v, want code 7", e)
	}
}

func TestLaunchPTYKilledBySignal(t *testing.T) {
	l, _ := testLocal(t)
	p, _, _, _ := launchPTY(t, l, Spec{User: "tester", Command: "kill -TERM $$"})
	e := waitExit(t, p)
	if e.Signal != syscall.SIGTERM || e.SignalName() != "TERM" {
		t.Fatalf("Exit = %+v (name %q), want Signal SIGTERM", e, e.SignalName())
	}
}

func TestProcessSignal(t *testing.T) {
	l, _ := testLocal(t)
	// cat runs as a child of sh, in its process group. Its copy of the input
	// line (after the terminal's own echo) proves it is running, not between
	// fork and exec, where sh would hold the interrupt until the child ends.
	p, master, _, out := launchPTY(t, l, Spec{User: "tester", Command: "trap - INT; cat; echo NOT_REACHED"})
	if _, err := io.WriteString(master, "PING\n"); err != nil {
		t.Fatal(err)
	}
	out.expect(t, "PING\r\nPING\r\n")
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	if e := waitExit(t, p); e.Signal != syscall.SIGINT {
		t.Fatalf("Exit = %+v, want Signal SIGINT", e)
	}
	if err := p.Signal(syscall.SIGINT); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Signal after Wait = %v, want os.ErrProcessDone", err)
	}
	p.Hangup() // after Wait: must neither panic nor signal anything
}

func TestProcessHangupInteractiveShell(t *testing.T) {
	l, _ := testLocal(t)
	p, master, _, out := launchPTY(t, l, Spec{User: "tester", Term: "dumb"})
	// The echoed input reads RE""ADY; only the shell's output reads READY, so
	// seeing it proves the login shell is up and reading the terminal.
	if _, err := io.WriteString(master, "echo RE\"\"ADY\n"); err != nil {
		t.Fatal(err)
	}
	out.expect(t, "READY\r\n")
	p.Hangup()
	// SIGHUP, not the SIGKILL escalation, must end a shell that does not ignore it.
	if e := waitExit(t, p); e.Signal != syscall.SIGHUP {
		t.Fatalf("Exit = %+v, want Signal SIGHUP", e)
	}
}

func TestProcessHangupEscalatesToKill(t *testing.T) {
	l, _ := testLocal(t)
	p, _, _, out := launchPTY(t, l, Spec{User: "tester", Command: "trap '' HUP; echo READY; sleep 30"})
	out.expect(t, "READY")
	start := time.Now()
	p.Hangup()
	p.Hangup() // idempotent
	e := waitExit(t, p)
	if e.Signal != syscall.SIGKILL {
		t.Fatalf("Exit = %+v, want Signal SIGKILL after the grace", e)
	}
	if d := time.Since(start); d < hangupGrace {
		t.Fatalf("killed after %v, before the %v grace", d, hangupGrace)
	}
}

// TestProcessSignalRacesWait runs Signal against Wait under -race: Signal must
// stop with os.ErrProcessDone once Wait has reaped, and never race on state.
func TestProcessSignalRacesWait(t *testing.T) {
	l, _ := testLocal(t)
	p, _, _, _ := launchPTY(t, l, Spec{User: "tester", Command: "exit 0"})
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
	if e := waitExit(t, p); e != (Exit{}) {
		t.Errorf("Exit = %+v, want code 0", e)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Signal: %v", err)
		}
	case <-time.After(failAfter):
		t.Fatal("Signal never reported os.ErrProcessDone after Wait")
	}
}

// pipeSpec makes the three pipes of an exec session; it returns the spec
// (the child's ends) and the server's ends.
func pipeSpec(t *testing.T, user, command string) (spec Spec, stdin, stdout, stderr *os.File) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inW.Close(); outR.Close(); errR.Close() })
	return Spec{User: user, Command: command, Stdin: inR, Stdout: outW, Stderr: errW}, inW, outR, errR
}

// readAllAsync reads f to EOF; EOF arrives only once every write end is closed,
// which requires Launch to have closed the server's copy.
func readAllAsync(f *os.File) <-chan string {
	ch := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(f)
		ch <- string(b)
	}()
	return ch
}

func recvString(t *testing.T, what string, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(failAfter):
		t.Fatalf("%s: no EOF (a write end is still open)", what)
		return ""
	}
}

func TestLaunchPipes(t *testing.T) {
	l, _ := testLocal(t)
	spec, stdin, stdout, stderr := pipeSpec(t, "tester", "cat; echo out; echo err >&2; exit 3")
	p, err := l.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) })
	outCh, errCh := readAllAsync(stdout), readAllAsync(stderr)
	if _, err := io.WriteString(stdin, "hello\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close() // cat ends only if EOF reaches the child
	gotOut, gotErr := recvString(t, "stdout", outCh), recvString(t, "stderr", errCh)
	if e := waitExit(t, p); e != (Exit{Code: 3}) {
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
	spec, stdin, stdout, _ := pipeSpec(t, "tester", "env; pwd")
	spec.Env = []string{"APTL_SESSION_ID=s-1"}
	stdin.Close()
	p, err := l.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) })
	got := recvString(t, "stdout", readAllAsync(stdout))
	waitExit(t, p)
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
	nobody, err := lookupPasswd(systemPasswd, "nobody")
	if err != nil {
		t.Skipf("needs user nobody in %s: %v", systemPasswd, err)
	}
	if nobody.UID == 0 {
		t.Skip("nobody is uid 0 here")
	}
	const extraGID = 4242
	l := NewLocal()
	l.passwdPath = writeFixture(t, "passwd", fmt.Sprintf("nobody:x:%d:%d::/nonexistent:/bin/sh\n", nobody.UID, nobody.GID))
	l.groupPath = writeFixture(t, "group", fmt.Sprintf("extra:x:%d:root,nobody\n", extraGID))
	spec, stdin, stdout, _ := pipeSpec(t, "nobody", "id -u; id -g; id -G; pwd")
	stdin.Close()
	p, err := l.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) })
	got := recvString(t, "stdout", readAllAsync(stdout))
	if e := waitExit(t, p); e != (Exit{}) {
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
