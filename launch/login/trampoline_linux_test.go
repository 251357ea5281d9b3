package login

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
)

// TestMain makes the test binary host the login trampoline, as the
// sidecar's and the agent's mains do: Start re-executes it as the
// trampoline.
func TestMain(m *testing.M) {
	TrampolineMain()
	if os.Getenv(loginUIDSetRole) != "" {
		os.Exit(loginUIDSetHelper())
	}
	os.Exit(m.Run())
}

// loginUIDSetRole selects the helper role of TestTrampolineWithLoginUIDSet.
const loginUIDSetRole = "APTL_LOGIN_TEST_LOGINUID_SET"

// loginUIDSetHelper starts a session through the trampoline from a process
// whose loginuid is set and that lacks CAP_AUDIT_CONTROL, and prints what
// the process reports of its audit session.
func loginUIDSetHelper() int {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	acct := Account{ID: launch.Identity{User: "self", UID: os.Geteuid(), GID: os.Getegid(), Home: "/", Shell: "/bin/true"}}
	cmd, err := Command(launch.Spec{User: "self", Command: "x", Stdin: devnull, Stdout: devnull, Stderr: devnull}, acct)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	p, err := Start(cmd, acct)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	ses, ok := p.AuditSession()
	fmt.Printf("ses=%d ok=%v note=%s\n", ses, ok, p.AuditSessionNote())
	p.Wait()
	return 0
}

// TestTrampolineWithLoginUIDSet: a launcher whose own loginuid is set (it
// was started from a login session) and that lacks CAP_AUDIT_CONTROL cannot
// give a session an audit session of its own; the session still starts,
// and the note says why.
func TestTrampolineWithLoginUIDSet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: capsh drops CAP_AUDIT_CONTROL from the bounding set")
	}
	if _, err := exec.LookPath("capsh"); err != nil {
		t.Skip("capsh (libcap2-bin) not installed")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The shell sets its own (unset) loginuid, then becomes the helper.
	cmd := exec.Command("capsh", "--drop=cap_audit_control", "--", "-c", `echo 4321 > /proc/self/loginuid && exec "$0"`, exe)
	cmd.Env = append(os.Environ(), loginUIDSetRole+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(out))
	t.Logf("helper: %s", got)
	if !strings.HasPrefix(got, "ses=0 ok=false note=") || !strings.Contains(got, "already set (4321)") ||
		!strings.Contains(got, "shares the launcher's audit session") {
		t.Errorf("helper reported %q; want no audit session, because the loginuid 4321 is already set", got)
	}
}

// testAccount is the account a trampolined test session runs as: a
// switched user when the test runs as root, else the test's own user.
func testAccount(t *testing.T) Account {
	t.Helper()
	home := t.TempDir()
	if os.Geteuid() != 0 {
		return Account{ID: launch.Identity{User: "self", UID: os.Geteuid(), GID: os.Getegid(), Home: home, Shell: "/bin/sh"}}
	}
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	// The temp dir's parents are 0700 root: let the user reach home.
	for d := filepath.Dir(home); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return Account{ID: launch.Identity{User: "tramp", UID: 4242, GID: 4243, Home: home, Shell: "/bin/sh"},
		Cred: &syscall.Credential{Uid: 4242, Gid: 4243, Groups: []uint32{4243, 27, 100}}}
}

// procView is what the kernel shows of a started session process that
// must not depend on how it was started.
type procView struct {
	cmdline, environ, cwd string
	status                map[string]string // the credential, capability, signal and umask lines
	limits                string
	fds                   []string // fd numbers
	sidIsPid, pgidIsPid   bool
	ttyIsSlave            bool
}

var viewStatusLines = []string{"Umask", "Uid", "Gid", "Groups", "SigBlk", "SigIgn", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs"}

func viewOf(t *testing.T, pid int, slave string) procView {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	v := procView{cmdline: read("cmdline"), environ: read("environ"), limits: read("limits"), status: map[string]string{}}
	var err error
	if v.cwd, err = os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(read("status")) {
		k, val, _ := strings.Cut(strings.TrimSpace(line), ":")
		if slices.Contains(viewStatusLines, k) {
			v.status[k] = strings.TrimSpace(val)
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		v.fds = append(v.fds, e.Name())
	}
	stat := read("stat")
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+2:]) // state ppid pgrp session tty_nr ...
	v.pgidIsPid, v.sidIsPid = f[2] == strconv.Itoa(pid), f[3] == strconv.Itoa(pid)
	var st syscall.Stat_t
	if err := syscall.Stat(slave, &st); err != nil {
		t.Fatal(err)
	}
	v.ttyIsSlave = f[4] == strconv.FormatUint(st.Rdev, 10)
	return v
}

// startPTY builds the session command for acct on a new PTY and starts it
// directly (cmd.Start, as without the trampoline) or through it.
func startPTY(t *testing.T, acct Account, command string, env []string, trampoline bool) (*Process, string, *os.File) {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("no PTY available: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	spec := launch.Spec{User: acct.ID.User, Command: command, Env: env, Term: "vt100", TTY: slave}
	cmd, err := Command(spec, acct)
	if err != nil {
		t.Fatal(err)
	}
	var p *Process
	if trampoline {
		p, err = Start(cmd, acct)
	} else {
		err = cmd.Start()
		if err == nil {
			p = NewProcess(cmd, acct.ID)
		}
	}
	slave.Close()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		p.Hangup()
		p.Wait()
	})
	return p, spec.TTY.Name(), master
}

// TestTrampolineMatchesDirectStart starts the same session command once as
// os/exec starts it and once through the login trampoline, and compares
// what the kernel shows of both shells: argv, environment (duplicates
// resolved the same way), working directory, credentials, capabilities,
// signal mask and dispositions, umask, limits, open fds, session, process
// group and controlling terminal. Only the loginuid and the audit session
// differ: the trampolined shell has the account's uid and a fresh ses.
func TestTrampolineMatchesDirectStart(t *testing.T) {
	acct := testAccount(t)
	env := []string{"LANG=C", "TZ=UTC", "LANG=C.UTF-8", "APTL_SESSION_ID=s-1"}
	// The view is taken once the shell waits in read: what it opens as it
	// starts (dash keeps the terminal on a high fd) is then in place.
	const command = "echo READY; read line"
	direct, dslave, dmaster := startPTY(t, acct, command, env, false)
	tramp, tslave, tmaster := startPTY(t, acct, command, env, true)
	testutil.ReadMaster(dmaster).Expect(t, "READY")
	testutil.ReadMaster(tmaster).Expect(t, "READY")

	// The trampoline itself ran with an empty environment and only its
	// marker as argv: nothing of the session reached the root-run Go program.
	if tc := tramp.cmd; tc.Env == nil || len(tc.Env) != 0 || !slices.Equal(tc.Args, []string{trampolineArg0}) {
		t.Errorf("the trampoline was started with env %q and argv %q", tc.Env, tc.Args)
	}
	dv, tv := viewOf(t, direct.Pid(), dslave), viewOf(t, tramp.Pid(), tslave)
	if !tv.sidIsPid || !tv.pgidIsPid || !tv.ttyIsSlave {
		t.Errorf("trampolined shell: session leader %v, group leader %v, controlling tty is its slave %v; want all",
			tv.sidIsPid, tv.pgidIsPid, tv.ttyIsSlave)
	}
	for _, c := range []struct {
		what   string
		d, tr  any
		direct bool
	}{
		{"argv", dv.cmdline, tv.cmdline, true},
		{"environment", dv.environ, tv.environ, true},
		{"working directory", dv.cwd, tv.cwd, true},
		{"status lines " + strings.Join(viewStatusLines, ","), dv.status, tv.status, true},
		{"limits", dv.limits, tv.limits, true},
		{"open fds", dv.fds, tv.fds, true},
		{"session, group, tty", [3]bool{dv.sidIsPid, dv.pgidIsPid, dv.ttyIsSlave}, [3]bool{tv.sidIsPid, tv.pgidIsPid, tv.ttyIsSlave}, true},
	} {
		if fmt.Sprint(c.d) != fmt.Sprint(c.tr) {
			t.Errorf("%s differ:\n direct:     %q\n trampoline: %q", c.what, c.d, c.tr)
		}
	}
	if got := strings.Split(strings.TrimSuffix(tv.environ, "\x00"), "\x00"); !slices.Contains(got, "LANG=C.UTF-8") || slices.Contains(got, "LANG=C") {
		t.Errorf("environment %q: want the last LANG only", got)
	}
	if os.Geteuid() == 0 && tv.status["Uid"] != "4242\t4242\t4242\t4242" {
		t.Errorf("trampolined shell Uid line %q, want 4242 throughout", tv.status["Uid"])
	}

	if _, ok := direct.AuditSession(); ok {
		t.Errorf("a directly started process reports an audit session")
	}
	ses, ok := tramp.AuditSession()
	if !ok {
		t.Fatalf("trampolined process has no audit session: %s", tramp.AuditSessionNote())
	}
	if got := procU32(t, tramp.Pid(), "sessionid"); got != ses {
		t.Errorf("reported ses %d, /proc/%d/sessionid %d", ses, tramp.Pid(), got)
	}
	if got := procU32(t, tramp.Pid(), "loginuid"); got != uint32(acct.ID.UID) {
		t.Errorf("loginuid %d, want the account's uid %d", got, acct.ID.UID)
	}
	if got := procU32(t, os.Getpid(), "loginuid"); got != AuditSessionUnset {
		t.Errorf("the launcher's own loginuid changed to %d", got)
	}
}

func procU32(t *testing.T, pid int, name string) uint32 {
	t.Helper()
	n, err := readProcU32(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTrampolineAuditSessionInherited: two sessions get different audit
// sessions, and what a session's shell spawns carries its session's.
func TestTrampolineAuditSessionInherited(t *testing.T) {
	acct := testAccount(t)
	const command = "cat /proc/self/sessionid; echo; cat /proc/self/loginuid; echo; echo END"
	var seen []uint32
	for range 2 {
		p, _, master := startPTY(t, acct, command, nil, true)
		ses, ok := p.AuditSession()
		if !ok {
			t.Fatalf("no audit session: %s", p.AuditSessionNote())
		}
		term := testutil.ReadMaster(master)
		term.Expect(t, "END")
		out := term.All(t)
		fields := strings.Fields(out)
		if len(fields) < 3 || fields[0] != strconv.FormatUint(uint64(ses), 10) || fields[1] != strconv.Itoa(acct.ID.UID) {
			t.Errorf("the shell's child printed %q; want its session's ses %d and loginuid %d", out, ses, acct.ID.UID)
		}
		seen = append(seen, ses)
	}
	if seen[0] == seen[1] {
		t.Errorf("two sessions share audit session %d", seen[0])
	}
}

// TestTrampolineStartFailures: a shell that cannot be exec'd, or a home
// that cannot be entered, fails Start with the reason, as cmd.Start fails,
// and leaves nothing running.
func TestTrampolineStartFailures(t *testing.T) {
	acct := testAccount(t)
	for _, tc := range []struct {
		name  string
		edit  func(*exec.Cmd)
		error string
	}{
		{"missing shell", func(c *exec.Cmd) { c.Path = "/nonexistent/shell" }, "exec /nonexistent/shell: no such file or directory"},
		{"missing dir", func(c *exec.Cmd) { c.Dir = "/nonexistent/home" }, "chdir /nonexistent/home: no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			cmd, err := Command(launch.Spec{User: acct.ID.User, Command: "true", Stdin: r, Stdout: w, Stderr: w}, acct)
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(cmd)
			before := childCount(t)
			p, err := Start(cmd, acct)
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Fatalf("Start = %v, %v; want an error containing %q", p, err, tc.error)
			}
			if got := childCount(t); got != before {
				t.Errorf("children after the failed start: %d, before: %d", got, before)
			}
			w.Close()
			if b, _ := io.ReadAll(r); len(b) != 0 {
				t.Errorf("the trampoline wrote %q to the session's output", b)
			}
		})
	}
}

func childCount(t *testing.T) int {
	t.Helper()
	files, _ := filepath.Glob("/proc/self/task/*/children")
	n := 0
	for _, f := range files {
		b, _ := os.ReadFile(f)
		n += len(strings.Fields(string(b)))
	}
	return n
}

// TestTrampolineSpecEncoding round-trips a spec with bytes that are not
// UTF-8 and refuses truncated or padded ones.
func TestTrampolineSpecEncoding(t *testing.T) {
	want := trampolineSpec{path: "/bin/sh", dir: "/home/x", argv: []string{"/bin/sh", "-c", "echo \xff\x00"},
		env: []string{"A=1", "B=\xfe"}, loginUID: 1000,
		cred: &syscall.Credential{Uid: 1000, Gid: 1001, Groups: []uint32{1001, 27}}}
	b := encodeTrampolineSpec(want)
	got, err := readTrampolineSpec(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got  %+v\n want %+v", got, want)
	}
	noCred := want
	noCred.cred = nil
	if got, err := readTrampolineSpec(bytes.NewReader(encodeTrampolineSpec(noCred))); err != nil || got.cred != nil {
		t.Errorf("spec without credential: %+v, %v", got, err)
	}
	for i := 4; i < len(b); i += 7 {
		if _, err := decodeTrampolineSpec(b[4:i]); err == nil {
			t.Errorf("a spec cut to %d bytes decoded", i)
		}
	}
	if _, err := decodeTrampolineSpec(append(slices.Clone(b[4:]), 0)); err == nil {
		t.Error("a spec with a byte after it decoded")
	}
	huge := []byte{0xff, 0xff, 0xff, 0xff}
	if _, err := readTrampolineSpec(bytes.NewReader(huge)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a 4 GiB spec: %v", err)
	}
	// A flag other than the 0 or 1 this format writes (NoSetGroups as 2).
	// The credentials end the spec: no-setgroups, the count, the groups.
	other := slices.Clone(b)
	binary.BigEndian.PutUint32(other[len(other)-4*(2+len(want.cred.Groups)):], 2)
	if _, err := readTrampolineSpec(bytes.NewReader(other)); err == nil || !strings.Contains(err.Error(), "other than 0 or 1") {
		t.Errorf("a spec with NoSetGroups 2: %v, want it refused", err)
	}
}

// TestDedupEnvMatchesOSExec: the trampoline's environment is the one
// os/exec passes for the same Cmd.Env.
func TestDedupEnvMatchesOSExec(t *testing.T) {
	env := []string{"A=1", "B=2", "A=3", "noequals", "", "C=", "B=4"}
	got, err := dedupEnv(env)
	if err != nil {
		t.Fatal(err)
	}
	out, err := (&exec.Cmd{Path: "/usr/bin/env", Args: []string{"env", "-0"}, Env: env}).Output()
	if err != nil {
		t.Skipf("env(1): %v", err)
	}
	want := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !slices.Equal(got, want) {
		t.Errorf("dedupEnv = %q, os/exec gave %q", got, want)
	}
	if _, err := dedupEnv([]string{"A=\x00"}); err == nil {
		t.Error("NUL accepted")
	}
}

// TestTrampolineUnavailable: when the trampoline cannot be started at all
// (no /proc/self/exe in the launcher's mount namespace), the session still
// starts, directly, and the note says why it has no audit session.
func TestTrampolineUnavailable(t *testing.T) {
	defer func(old string) { trampolineExe = old }(trampolineExe)
	trampolineExe = "/nonexistent/proc/self/exe"
	acct := testAccount(t)
	p, _, master := startPTY(t, acct, "echo STARTED_$((6*7))", nil, true)
	testutil.ReadMaster(master).Expect(t, "STARTED_42")
	if ses, ok := p.AuditSession(); ok || ses != 0 || !strings.Contains(p.AuditSessionNote(), "could not be started") {
		t.Errorf("AuditSession = %d, %v, note %q; want none, because the trampoline could not be started", ses, ok, p.AuditSessionNote())
	}
}

// copyTestProgram copies this test binary (the same build, so
// UseTrampolineProgram accepts it) to a new folder as name with mode, and
// returns its path.
func copyTestProgram(t *testing.T, name string, mode os.FileMode) string {
	t.Helper()
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, self, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // WriteFile's mode passes the umask
		t.Fatal(err)
	}
	return path
}

func restoreTrampolineExe(t *testing.T) {
	old := trampolineExe
	t.Cleanup(func() { trampolineExe = old })
}

// TestUseTrampolineProgram: a program of this build beside the launcher
// becomes the trampoline, copied into a sealed memory file when it is
// accepted: the file overwritten in place and then removed afterwards,
// each session's start still executes the copy (an inotify watch on it
// counts the exec's open) and gets its audit session.
func TestUseTrampolineProgram(t *testing.T) {
	restoreTrampolineExe(t)
	path := copyTestProgram(t, TrampolineProgram, 0o755)
	if err := UseTrampolineProgram(path); err != nil {
		t.Fatalf("UseTrampolineProgram: %v", err)
	}
	fd, _ := strconv.Atoi(strings.TrimPrefix(trampolineExe, "/proc/self/fd/"))
	defer syscall.Close(fd)
	if fd < trampolineProgramFD {
		t.Errorf("the program is on fd %d, below %d, where a session's start puts its own", fd, trampolineProgramFD)
	}
	if target, err := os.Readlink(trampolineExe); err != nil || !strings.HasPrefix(target, "/memfd:"+TrampolineProgram) {
		t.Fatalf("trampoline %s links to %q, %v; want the memory file", trampolineExe, target, err)
	}
	const allSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0); err != nil || seals != allSeals {
		t.Errorf("the copy's seals are %#x, %v; want %#x (no write, grow, shrink or new seal)", seals, err, allSeals)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	opens := testutil.WatchOpens(t, trampolineExe)
	p, _, master := startPTY(t, testAccount(t), "echo STARTED_$((6*7))", nil, true)
	testutil.ReadMaster(master).Expect(t, "STARTED_42")
	if n := opens()[trampolineExe]; n != 1 {
		t.Errorf("the copy was opened %d times for one session's start, want 1 (its exec)", n)
	}
	if ses, ok := p.AuditSession(); !ok && strings.Contains(p.AuditSessionNote(), "could not be started") {
		t.Errorf("AuditSession = %d, %v, note %q: the trampoline program did not run", ses, ok, p.AuditSessionNote())
	}
}

// TestUseTrampolineProgramRefuses: each file the trampoline must not run
// from is refused with its reason, and sessions keep re-executing this
// program.
func TestUseTrampolineProgramRefuses(t *testing.T) {
	restoreTrampolineExe(t)
	notGo := filepath.Join(t.TempDir(), TrampolineProgram)
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(notGo, 0o755)
	link := filepath.Join(t.TempDir(), TrampolineProgram)
	if err := os.Symlink(copyTestProgram(t, "real", 0o755), link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), TrampolineProgram)
	if err := unix.Mkfifo(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	shared := copyTestProgram(t, TrampolineProgram, 0o755)
	if err := os.Chmod(filepath.Dir(shared), 0o777); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path, want string
	}{
		{"absent", filepath.Join(t.TempDir(), TrampolineProgram), "no such file"},
		{"directory", t.TempDir(), "not a regular file"},
		{"symbolic link", link, "a symbolic link"},
		{"FIFO", fifo, "not a regular file"},
		{"not executable", copyTestProgram(t, TrampolineProgram, 0o644), "not executable"},
		{"group-writable", copyTestProgram(t, TrampolineProgram, 0o775), "it is writable by group or others"},
		{"world-writable", copyTestProgram(t, TrampolineProgram, 0o757), "it is writable by group or others"},
		{"folder writable by others", shared, "its folder is writable by group or others"},
		{"not a Go program", notGo, "not a Go program"},
	}
	if os.Geteuid() == 0 {
		other := copyTestProgram(t, TrampolineProgram, 0o755)
		if err := os.Chown(other, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ name, path, want string }{"owned by another user", other, "it is owned by uid 4242"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := UseTrampolineProgram(c.path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("UseTrampolineProgram(%s) = %v, want an error saying %q", c.path, err, c.want)
			}
			if trampolineExe != "/proc/self/exe" {
				t.Fatalf("refused, yet the trampoline is now %s", trampolineExe)
			}
		})
	}
}

// TestCheckRun: a program is used only when it runs and answers the check
// run with this program's trampoline format, within the bound; one that
// overstays is killed with its process group.
func TestCheckRun(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	answer := trampolineCheckAnswer()
	if err := checkRun(script("answers", "echo '"+answer+"'")); err != nil {
		t.Errorf("a program answering %q: %v", answer, err)
	}
	for name, body := range map[string]string{
		"another format": "echo '" + TrampolineProgram + " format 00'",
		"says nothing":   "exit 0",
		"exits 2":        "echo '" + answer + "'; exit 2",
		"killed":         "kill -9 $$",
	} {
		if err := checkRun(script(strings.ReplaceAll(name, " ", "-"), body)); err == nil {
			t.Errorf("a program that does %q was accepted", body)
		}
	}
	if err := checkRun(filepath.Join(dir, "absent")); err == nil || !strings.Contains(err.Error(), "does not run") {
		t.Errorf("an absent program: %v", err)
	}
	defer func(old time.Duration) { checkRunTimeout = old }(checkRunTimeout)
	checkRunTimeout = 200 * time.Millisecond
	pidFile := filepath.Join(dir, "child.pid")
	start := time.Now()
	err := checkRun(script("overstays", "sleep 30 & echo $! > "+pidFile+"; wait"))
	if err == nil || !strings.Contains(err.Error(), "did not end") {
		t.Fatalf("a program that overstays: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the check run returned after %v: its child kept it waiting", d)
	}
	b, _ := os.ReadFile(pidFile)
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
		if err := syscall.Kill(pid, 0); err == nil {
			// Reaped by init soon after the kill; give it a moment.
			time.Sleep(200 * time.Millisecond)
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z") {
				t.Errorf("the overstaying program's child %d still runs", pid)
			}
		}
	}
}

// TestUseTrampolineProgramWithoutMFDExec: on a kernel without MFD_EXEC
// (before 6.3, EINVAL), the copy is made without it, executable by default.
func TestUseTrampolineProgramWithoutMFDExec(t *testing.T) {
	restoreTrampolineExe(t)
	defer func(old func(string, int) (int, error)) { memfdCreate = old }(memfdCreate)
	var flags []int
	memfdCreate = func(name string, f int) (int, error) {
		flags = append(flags, f)
		if f&unix.MFD_EXEC != 0 {
			return -1, unix.EINVAL
		}
		return unix.MemfdCreate(name, f)
	}
	if err := UseTrampolineProgram(copyTestProgram(t, TrampolineProgram, 0o755)); err != nil {
		t.Fatalf("UseTrampolineProgram: %v", err)
	}
	fd, _ := strconv.Atoi(strings.TrimPrefix(trampolineExe, "/proc/self/fd/"))
	defer syscall.Close(fd)
	if len(flags) != 2 || flags[1]&unix.MFD_EXEC != 0 {
		t.Errorf("memfd_create flags %#x, want one try with MFD_EXEC and one without", flags)
	}
}

// TestSameBuild: programs are one build only when toolchain, main module,
// every build setting and the modules both link agree; the reason names
// what differs, never a setting's value.
func TestSameBuild(t *testing.T) {
	ours, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information")
	}
	clone := func(edit func(*debug.BuildInfo)) *debug.BuildInfo {
		c := *ours
		c.Settings = slices.Clone(ours.Settings)
		c.Deps = slices.Clone(ours.Deps)
		edit(&c)
		return &c
	}
	if why := sameBuild(ours, clone(func(*debug.BuildInfo) {})); why != "" {
		t.Fatalf("identical builds differ: %s", why)
	}
	// A test binary's build information lists no modules: give this one a
	// dependency to compare.
	dep := &debug.Module{Path: "example.com/dep", Version: "v1.0.0", Sum: "h1:x"}
	withDep := *ours
	withDep.Deps = []*debug.Module{dep}
	ours = &withDep
	cases := []struct {
		name string
		edit func(*debug.BuildInfo)
		want string
	}{
		{"toolchain", func(b *debug.BuildInfo) { b.GoVersion = "go1.0" }, "toolchain go1.0"},
		{"module version", func(b *debug.BuildInfo) { b.Main.Version = "v9.9.9" }, "v9.9.9"},
		{"module path", func(b *debug.BuildInfo) { b.Main.Path = "example.com/other" }, "example.com/other"},
		{"setting changed", func(b *debug.BuildInfo) {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: "GOARCH", Value: "vax"})
		}, "build setting GOARCH differs"},
		{"setting only theirs", func(b *debug.BuildInfo) {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: "-ldflags", Value: "-X main.secret=1"})
		}, "build setting -ldflags differs"},
		{"dependency version", func(b *debug.BuildInfo) {
			d := *b.Deps[0]
			d.Version = "v0.0.0-other"
			b.Deps[0] = &d
		}, "module example.com/dep is another version"},
		{"dependency replaced", func(b *debug.BuildInfo) {
			d := *b.Deps[0]
			d.Replace = &debug.Module{Path: "../local/dep", Version: "(devel)"}
			b.Deps[0] = &d
		}, "module example.com/dep is another version"},
	}
	for _, c := range cases {
		why := sameBuild(ours, clone(c.edit))
		if !strings.Contains(why, c.want) {
			t.Errorf("%s: sameBuild = %q, want it to say %q", c.name, why, c.want)
		}
		if strings.Contains(why, "secret") || strings.Contains(why, "vax") {
			t.Errorf("%s: sameBuild = %q names a setting's value", c.name, why)
		}
	}
	// A setting only this program has; a module only one of them links
	// is no difference (the programs link different packages).
	if why := sameBuild(clone(func(b *debug.BuildInfo) {
		b.Settings = append(b.Settings, debug.BuildSetting{Key: "-tags", Value: "x"})
	}), ours); !strings.Contains(why, "-tags") {
		t.Errorf("a setting only this program has: sameBuild = %q", why)
	}
	if why := sameBuild(ours, clone(func(b *debug.BuildInfo) {
		b.Deps = append(b.Deps, &debug.Module{Path: "example.com/only-theirs", Version: "v1.0.0"})
	})); why != "" {
		t.Errorf("a module only the other links: sameBuild = %q, want no difference", why)
	}
}
