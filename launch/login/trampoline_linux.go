package login

// The login trampoline: how a session process gets a kernel audit session
// (`ses`) of its own, as pam_loginuid gives one to an sshd login.
//
// Why a trampoline: the kernel lets only a process itself write its
// /proc/<pid>/loginuid (proc_loginuid_write refuses any other writer), and
// without privilege only while it is unset; the write gives the process a
// fresh audit session id that its children inherit. Go runs no code of ours
// between fork and exec, so the launcher (launch/local, or agentd in the
// workload) starts its own binary as the session process, with argv[0]
// trampolineArg0, an empty environment and one extra fd. That process
// (runTrampoline) reads the real command from the fd, writes the loginuid,
// reports the kernel's sessionid on the same fd, switches to the session's
// identity (setgroups, setgid, setuid, then chdir, in the order os/exec's
// child uses) and execve()s the login shell with exactly the path, argv and
// environment os/exec would have given it. The fd is close-on-exec, so the
// shell never sees it; its closing is the launcher's sign that the exec
// succeeded.
//
// Why before the identity change: the trampoline is our own binary, which
// the session user may not be allowed to execute (an agent installed 0700),
// and a setuid child is not dumpable, so its /proc files belong to root.
// Running as the launcher's user, the trampoline must not be steerable by
// the client: its environment is empty (no loader or Go runtime variable
// of the session reaches it; the session's env travels over the fd and is
// handed to the shell only), and the client controls neither its argv nor
// the fd. A workload process that starts the binary with the marker itself
// gains nothing: the trampoline runs with that process's privileges, writes
// only its own loginuid (which it could write anyway) and execs what it was
// told.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"golang.org/x/sys/unix"
)

const (
	// trampolineArg0 marks the trampoline: argv is exactly [trampolineArg0].
	trampolineArg0 = "aptl-login-trampoline"
	// trampolineFD is the trampoline's end of the socketpair to its launcher
	// (the first of exec.Cmd.ExtraFiles).
	trampolineFD = 3
	// maxTrampolineSpec bounds the command the launcher sends: argv and env
	// of a session (the agent's frame bound, agentwire.MaxRequestFrame, is
	// 192 KiB) and a few short fields.
	maxTrampolineSpec = 1 << 20
	// maxTrampolineReport bounds what the launcher reads back.
	maxTrampolineReport = 4 << 10
	// trampolineTimeout bounds the whole exchange, from the trampoline's
	// start to the shell's exec: a healthy one takes milliseconds.
	trampolineTimeout = 10 * time.Second
	// trampolineExitFailed is the trampoline's exit status when it could
	// not exec the shell, as a shell's for a command it cannot run.
	trampolineExitFailed = 127
)

// AuditSessionUnset is the kernel's AUDIT_SID_UNSET: /proc/<pid>/sessionid
// of a process whose loginuid was never set. Audit session ids start at 1.
const AuditSessionUnset = 1<<32 - 1

var trampolineHost atomic.Bool

// trampolineExe is the trampoline's binary: this very program, even if its
// file was since replaced, or the sealed copy UseTrampolineProgram made.
// Tests point it elsewhere to see the fallback.
var trampolineExe = "/proc/self/exe"

// trampolineProgramFD is the lowest descriptor UseTrampolineProgram keeps
// the program on: above the ones os/exec's child puts in place or moves
// through (stdin, stdout, stderr, trampolineFD, and the few above them it
// uses to shuffle descriptors) before the exec reads the program.
const trampolineProgramFD = 10

// maxTrampolineProgram bounds the program UseTrampolineProgram copies:
// a few MB built, so 64 MiB is no build of it.
const maxTrampolineProgram = 64 << 20

// trampolineCheckArg0 is the argv[0] of the check run of a program before
// it is used: TrampolineMain answers it with trampolineCheckAnswer.
const trampolineCheckArg0 = "aptl-login-trampoline-check"

// checkRunTimeout bounds the check run; tests shorten it.
var checkRunTimeout = trampolineTimeout

// memfdCreate is unix.MemfdCreate; tests stand in for kernels without
// MFD_EXEC.
var memfdCreate = unix.MemfdCreate

// UseTrampolineProgram makes Start run the trampoline from the program at
// path instead of re-executing this one. Why: the trampoline runs once a
// session, and a server that links the pcap witness takes 7 to 10 ms to
// start (41 MB of tables that one dependency's init fills), a program that
// links only this package about 2 (docs/BENCHMARKS.md).
//
// The program is copied now into a sealed memory file, and every session
// executes that copy: neither replacing nor overwriting the file later
// changes what runs (as with /proc/self/exe, which the kernel keeps from
// being written while it runs). It is refused, and sessions keep
// re-executing this program, unless: it is a regular executable file,
// not a symbolic link, in a folder that only its owner may write, that
// only its owner (root or this process's user) may write; it is built from
// the same module, revision and toolchain with the same settings and the
// same versions of the modules both link as this program
// (runtime/debug.ReadBuildInfo); and the copy, run once with the check
// argv, answers with the digest of the trampoline's code this program has
// (trampolineCheckAnswer): the launcher and the trampoline speak a format
// private to that code, and two builds of one revision with uncommitted
// changes to it carry the same revision but not the same digest.
func UseTrampolineProgram(path string) error {
	mem, err := copyTrampolineProgram(path)
	if err != nil {
		return fmt.Errorf("login trampoline program %s: %w", path, err)
	}
	defer mem.Close()
	theirs, err := buildinfo.Read(mem)
	if err != nil {
		return fmt.Errorf("login trampoline program %s: not a Go program with build information: %w", path, err)
	}
	ours, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("login trampoline program: this program has no build information to compare")
	}
	if why := sameBuild(ours, theirs); why != "" {
		return fmt.Errorf("login trampoline program %s: not from this program's build: %s", path, why)
	}
	fd, err := unix.FcntlInt(mem.Fd(), unix.F_DUPFD_CLOEXEC, trampolineProgramFD)
	if err != nil {
		return fmt.Errorf("login trampoline program %s: %w", path, err)
	}
	exe := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := checkRun(exe); err != nil {
		unix.Close(fd)
		return fmt.Errorf("login trampoline program %s: %w", path, err)
	}
	trampolineExe = exe
	return nil
}

// copyTrampolineProgram checks the file at path and its folder and
// returns a sealed memory file holding its bytes.
func copyTrampolineProgram(path string) (*os.File, error) {
	dirFD, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("its folder: %w", err)
	}
	defer unix.Close(dirFD)
	var dirSt unix.Stat_t
	if err := unix.Fstat(dirFD, &dirSt); err != nil {
		return nil, fmt.Errorf("its folder: %w", err)
	}
	if err := checkOwnedNotShared(&dirSt, "its folder is"); err != nil {
		return nil, err
	}
	// O_NOFOLLOW: the program is what the folder holds, not what a link
	// in it points to; O_NONBLOCK: opening a FIFO must not wait.
	fd, err := unix.Openat(dirFD, filepath.Base(path), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, errors.New("a symbolic link")
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, errors.New("not a regular file")
	case st.Mode&0o111 == 0:
		return nil, errors.New("not executable")
	case st.Size > maxTrampolineProgram:
		return nil, fmt.Errorf("%d bytes, more than any build of it (%d)", st.Size, maxTrampolineProgram)
	}
	if err := checkOwnedNotShared(&st, "it is"); err != nil {
		return nil, err
	}
	memFD, err := memfdCreate(TrampolineProgram, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // a kernel before MFD_EXEC (6.3): executable by default
		memFD, err = memfdCreate(TrampolineProgram, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("a memory file for its copy: %w", err)
	}
	mem := os.NewFile(uintptr(memFD), "memfd:"+TrampolineProgram)
	n, err := io.Copy(mem, io.LimitReader(f, maxTrampolineProgram+1))
	if err == nil && n != st.Size {
		err = fmt.Errorf("it changed while copied (%d bytes, then %d)", st.Size, n)
	}
	if err == nil {
		_, err = unix.FcntlInt(mem.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL)
	}
	if err != nil {
		mem.Close()
		return nil, fmt.Errorf("copying it: %w", err)
	}
	return mem, nil
}

// checkOwnedNotShared refuses a file the trampoline must not be run from,
// or a folder it must not be taken from: it runs as the launcher's user
// (root) with each session's command.
func checkOwnedNotShared(st *unix.Stat_t, what string) error {
	switch {
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s writable by group or others (mode %#o)", what, st.Mode&0o7777)
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s owned by uid %d, neither root nor this process's user", what, st.Uid)
	}
	return nil
}

// checkRun runs the program at exe with trampolineCheckArg0: it must run
// and print this program's trampolineCheckAnswer (TrampolineMain does, in
// every program that hosts the trampoline), so it speaks the same format,
// within checkRunTimeout. It runs in a process group of its own, killed
// whole if it overstays.
func checkRun(exe string) error {
	ctx, cancel := context.WithTimeout(context.Background(), checkRunTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, exe)
	cmd.Args, cmd.Env = []string{trampolineCheckArg0}, []string{}
	cmd.Stdout = &limitedWriter{w: &out, n: 512}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("its copy does not run: %w", err)
	}
	err := cmd.Wait()
	want := trampolineCheckAnswer() + "\n"
	switch {
	case ctx.Err() != nil:
		return errors.New("its check run did not end")
	case err != nil:
		return fmt.Errorf("its check run failed (%v): not a program that hosts the login trampoline", err)
	case out.String() != want:
		return errors.New("its check run did not answer with this program's trampoline format: another build, or not a program that hosts the login trampoline")
	}
	return nil
}

// limitedWriter keeps the first n bytes written to it and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	keep := min(len(p), l.n)
	l.n -= keep
	if _, err := l.w.Write(p[:keep]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// sameBuild says how two programs' build information differs in what
// makes them one build: toolchain, main module and its version, every
// build setting (flags, target, VCS revision and state), and the version
// of every module both link. Empty: the same. It names what differs,
// never a setting's value (flags can carry what a build environment
// should not see in a log).
func sameBuild(a, b *debug.BuildInfo) string {
	switch {
	case a.GoVersion != b.GoVersion:
		return fmt.Sprintf("toolchain %s, this program %s", b.GoVersion, a.GoVersion)
	case a.Main.Path != b.Main.Path || a.Main.Version != b.Main.Version || a.Main.Sum != b.Main.Sum:
		return fmt.Sprintf("module %s %s, this program %s %s", b.Main.Path, b.Main.Version, a.Main.Path, a.Main.Version)
	}
	settings := func(bi *debug.BuildInfo) map[string]string {
		m := make(map[string]string, len(bi.Settings))
		for _, s := range bi.Settings {
			m[s.Key] = s.Value
		}
		return m
	}
	as, bs := settings(a), settings(b)
	keys := make([]string, 0, len(as)+len(bs))
	for k := range as {
		keys = append(keys, k)
	}
	for k := range bs {
		if _, ok := as[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if as[k] != bs[k] {
			return "build setting " + k + " differs"
		}
	}
	version := func(d *debug.Module) string {
		v := d.Version + " " + d.Sum
		if r := d.Replace; r != nil {
			v += " => " + r.Path + " " + r.Version + " " + r.Sum
		}
		return v
	}
	ours := make(map[string]string, len(a.Deps))
	for _, d := range a.Deps {
		ours[d.Path] = version(d)
	}
	for _, d := range b.Deps {
		if v, ok := ours[d.Path]; ok && v != version(d) {
			return "module " + d.Path + " is another version"
		}
	}
	return ""
}

// TrampolineMain is the login trampoline's entry point. Call it first in
// main, before anything else runs, in every program that launches
// sessions: if this process is a trampoline it never returns; otherwise it
// marks the program as able to start one (Start uses it from then on) and
// returns. A program that never calls it (a test binary) starts sessions
// without one, and they have no audit session of their own.
func TrampolineMain() {
	if len(os.Args) == 1 && os.Args[0] == trampolineArg0 {
		os.Exit(runTrampoline())
	}
	if len(os.Args) == 1 && os.Args[0] == trampolineCheckArg0 {
		// UseTrampolineProgram's check run: say which trampoline format
		// this program speaks.
		fmt.Println(trampolineCheckAnswer())
		os.Exit(0)
	}
	trampolineHost.Store(true)
}

// trampolineSource is this file, which holds both ends of the trampoline's
// exchange: its digest names the format a program speaks, so two builds
// of one revision with uncommitted changes to it are told apart.
//
//go:embed trampoline_linux.go
var trampolineSource []byte

// trampolineCheckAnswer is what a trampoline host prints to the check run.
func trampolineCheckAnswer() string {
	sum := sha256.Sum256(trampolineSource)
	return TrampolineProgram + " format " + hex.EncodeToString(sum[:])
}

// trampolineSpec is what the launcher sends the trampoline: the shell's
// exec, its working directory, the credentials to switch to (nil: keep
// the launcher's), and the loginuid to write.
type trampolineSpec struct {
	path, dir string
	argv, env []string
	cred      *syscall.Credential
	loginUID  uint32
}

// Report lines, trampoline → launcher, each "<word> <text>\n".
const (
	reportSes   = "ses"   // the kernel's sessionid after the loginuid write
	reportNone  = "none"  // no audit session of its own, and why
	reportError = "error" // the shell was not started, and why
)

// runTrampoline is the trampoline's body. It writes nothing to stdout or
// stderr (the session's terminal): every outcome goes to the launcher.
func runTrampoline() int {
	// loginuid and sessionid are per task: write, read and exec on one thread.
	runtime.LockOSThread()
	if _, err := unix.FcntlInt(trampolineFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		fmt.Fprintf(os.Stderr, "%s: not started by a session launcher (fd %d: %v)\n", trampolineArg0, trampolineFD, err)
		return trampolineExitFailed
	}
	conn := os.NewFile(trampolineFD, "launcher")
	report := func(word, text string) { _, _ = io.WriteString(conn, word+" "+oneLine(text)+"\n") }
	spec, err := readTrampolineSpec(conn)
	if err != nil {
		report(reportError, err.Error())
		return trampolineExitFailed
	}
	if ses, why := setLoginUID(spec.loginUID); why != "" {
		report(reportNone, why)
	} else {
		report(reportSes, strconv.FormatUint(uint64(ses), 10))
	}
	if err := becomeSessionUser(spec); err != nil {
		report(reportError, err.Error())
		return trampolineExitFailed
	}
	err = syscall.Exec(spec.path, spec.argv, spec.env)
	report(reportError, "exec "+spec.path+": "+err.Error())
	return trampolineExitFailed
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// setLoginUID writes uid to this task's loginuid, as pam_loginuid does, and
// returns the audit session id the kernel then gives it, or why there is
// none of the session's own. Writing an unset loginuid needs no privilege;
// changing a set one needs CAP_AUDIT_CONTROL (and a kernel that allows it).
func setLoginUID(uid uint32) (ses uint32, why string) {
	before, rerr := readProcU32("/proc/thread-self/loginuid")
	if errors.Is(rerr, os.ErrNotExist) {
		return 0, "the kernel has no audit support (no /proc/thread-self/loginuid)"
	}
	werr := os.WriteFile("/proc/thread-self/loginuid", []byte(strconv.FormatUint(uint64(uid), 10)), 0)
	if werr != nil {
		if rerr == nil && before != AuditSessionUnset {
			return 0, fmt.Sprintf("the launcher's loginuid is already set (%d) and it may not change it (%v): "+
				"the session shares the launcher's audit session", before, unwrapErrno(werr))
		}
		return 0, fmt.Sprintf("writing the loginuid failed: %v", unwrapErrno(werr))
	}
	ses, err := readProcU32("/proc/thread-self/sessionid")
	switch {
	case err != nil:
		return 0, fmt.Sprintf("reading the audit session id failed: %v", unwrapErrno(err))
	case ses == 0 || ses == AuditSessionUnset:
		return 0, fmt.Sprintf("the kernel gave no audit session id (%d)", ses)
	}
	return ses, ""
}

func unwrapErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// readProcU32 reads a /proc file holding one unsigned decimal.
func readProcU32(path string) (uint32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: not a number", path)
	}
	return uint32(n), nil
}

// becomeSessionUser switches to the session's credentials and working
// directory in the order os/exec's child does (syscall.forkAndExecInChild:
// setgroups, setgid, setuid, then chdir as the new user).
//
// WARNING: this is where a trampolined session stops running as root.
// Re-verify as root with:
//
//	go test -run 'TestTrampolineMatchesDirectStart|TestLocalRunsAsLoginUser' ./launch/login/ ./launch/local/
func becomeSessionUser(spec trampolineSpec) error {
	if c := spec.cred; c != nil {
		groups := make([]int, len(c.Groups))
		for i, g := range c.Groups {
			groups[i] = int(g)
		}
		// syscall's setters apply to every thread of the process (Go ≥ 1.16).
		if !c.NoSetGroups {
			if err := syscall.Setgroups(groups); err != nil {
				return fmt.Errorf("setgroups: %w", err)
			}
		}
		if err := syscall.Setgid(int(c.Gid)); err != nil {
			return fmt.Errorf("setgid: %w", err)
		}
		if err := syscall.Setuid(int(c.Uid)); err != nil {
			return fmt.Errorf("setuid: %w", err)
		}
	}
	if spec.dir != "" {
		if err := syscall.Chdir(spec.dir); err != nil {
			return fmt.Errorf("chdir %s: %w", spec.dir, err)
		}
	}
	return nil
}

// errNoTrampoline is a trampoline that could not be started at all (no
// /proc/self/exe, a binary on a noexec mount): Start then starts the
// session directly, without an audit session of its own.
var errNoTrampoline = errors.New("the login trampoline could not be started")

// startTrampolined starts cmd (built by Command) through the trampoline and
// waits, bounded, until the shell is exec'd. It returns the audit session
// the trampoline reported, confirmed against /proc/<pid>/sessionid, or
// (ses 0) why there is none. On error nothing is left running.
func startTrampolined(cmd *exec.Cmd, loginUID uint32) (tcmd *exec.Cmd, ses uint32, note string, err error) {
	env, err := dedupEnv(cmd.Env)
	if err != nil {
		return nil, 0, "", err
	}
	spec := trampolineSpec{path: cmd.Path, dir: cmd.Dir, argv: cmd.Args, env: env, loginUID: loginUID}
	attr := syscall.SysProcAttr{}
	if cmd.SysProcAttr != nil {
		attr = *cmd.SysProcAttr
	}
	spec.cred, attr.Credential = attr.Credential, nil // the trampoline switches
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, 0, "", fmt.Errorf("login: trampoline socketpair: %w", err)
	}
	// Non-blocking, so the launcher's end takes deadlines (os.NewFile polls it).
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, 0, "", fmt.Errorf("login: trampoline socketpair: %w", err)
	}
	conn, child := os.NewFile(uintptr(fds[0]), "trampoline"), os.NewFile(uintptr(fds[1]), "trampoline-child")
	defer conn.Close()
	tcmd = &exec.Cmd{Path: trampolineExe, Args: []string{trampolineArg0}, Env: []string{},
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr, ExtraFiles: []*os.File{child}, SysProcAttr: &attr}
	err = tcmd.Start()
	child.Close()
	if err != nil {
		return nil, 0, "", fmt.Errorf("%w: %w", errNoTrampoline, err)
	}
	ses, note, err = exchangeTrampoline(conn, spec)
	if err == nil {
		ses, note = confirmAuditSession(tcmd.Process.Pid, ses, note)
		return tcmd, ses, note, nil
	}
	_ = tcmd.Process.Kill()
	_ = tcmd.Wait()
	return nil, 0, "", err
}

// exchangeTrampoline sends spec and reads the report until the
// trampoline's end closes (the shell was exec'd) or it reports an error.
func exchangeTrampoline(conn *os.File, spec trampolineSpec) (ses uint32, note string, err error) {
	if err := conn.SetDeadline(time.Now().Add(trampolineTimeout)); err != nil {
		return 0, "", fmt.Errorf("login: trampoline: %w", err)
	}
	if _, err := conn.Write(encodeTrampolineSpec(spec)); err != nil {
		return 0, "", fmt.Errorf("login: send the command to the login trampoline: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(conn, maxTrampolineReport))
	if err != nil {
		return 0, "", fmt.Errorf("login: login trampoline: %w", err)
	}
	note = "the login trampoline reported nothing"
	for line := range strings.Lines(string(b)) {
		word, text, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		switch word {
		case reportSes:
			n, perr := strconv.ParseUint(text, 10, 32)
			if perr != nil || n == 0 || n == AuditSessionUnset {
				return 0, "", errors.New("login: login trampoline: malformed audit session report")
			}
			ses, note = uint32(n), ""
		case reportNone:
			ses, note = 0, text
		case reportError:
			return 0, "", fmt.Errorf("login: start shell: %s", text)
		default:
			return 0, "", errors.New("login: login trampoline: malformed report")
		}
	}
	return ses, note, nil
}

// confirmAuditSession checks the reported ses against what the kernel says
// of the process now running the shell (unreaped, so pid is still it).
func confirmAuditSession(pid int, ses uint32, note string) (uint32, string) {
	if ses == 0 {
		return 0, note
	}
	got, err := readProcU32(fmt.Sprintf("/proc/%d/sessionid", pid))
	switch {
	case err != nil:
		return 0, fmt.Sprintf("the shell's audit session could not be confirmed: %v", unwrapErrno(err))
	case got != ses:
		return 0, fmt.Sprintf("the trampoline reported audit session %d but the shell has %d", ses, got)
	}
	return ses, ""
}

// dedupEnv keeps the last of entries with the same key, in the order of
// those last entries, and refuses NUL: what os/exec does to Cmd.Env before
// execve (dedupEnv in os/exec), so the shell gets the same environment
// either way.
func dedupEnv(env []string) ([]string, error) {
	out := make([]string, 0, len(env))
	saw := make(map[string]bool, len(env))
	for i := len(env) - 1; i >= 0; i-- {
		kv := env[i]
		if strings.IndexByte(kv, 0) >= 0 {
			return nil, errors.New("login: environment variable contains NUL")
		}
		k, _, ok := strings.Cut(kv, "=")
		if !ok {
			if kv != "" {
				out = append(out, kv)
			}
			continue
		}
		if saw[k] {
			continue
		}
		saw[k] = true
		out = append(out, kv)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// The spec's encoding, in the agent protocol's codec (internal/agentwire):
// a u32 BE length of the rest, then fields in order: path, dir, loginuid,
// argv (count, strings), env (count, strings), has-credential (a flag),
// and with one uid, gid, no-setgroups (a flag), groups (count, u32s).
// Strings are bytes: a non-UTF-8 command reaches the shell as the client
// sent it.

func encodeTrampolineSpec(s trampolineSpec) []byte {
	e := agentwire.NewEncoder(make([]byte, 4, 256))
	e.Str(s.path)
	e.Str(s.dir)
	e.U32(s.loginUID)
	for _, list := range [][]string{s.argv, s.env} {
		e.U32(uint32(len(list)))
		for _, v := range list {
			e.Str(v)
		}
	}
	e.Flag(s.cred != nil)
	if s.cred != nil {
		e.U32(s.cred.Uid)
		e.U32(s.cred.Gid)
		e.Flag(s.cred.NoSetGroups)
		e.U32(uint32(len(s.cred.Groups)))
		for _, g := range s.cred.Groups {
			e.U32(g)
		}
	}
	b := e.Bytes()
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// readTrampolineSpec reads one spec from r. Its source is the launcher, of
// the same trampoline format (UseTrampolineProgram checks a separate
// program's), but it is still bounded: nothing a reader allocates exceeds
// maxTrampolineSpec.
func readTrampolineSpec(r io.Reader) (trampolineSpec, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return trampolineSpec{}, fmt.Errorf("read the command: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxTrampolineSpec {
		return trampolineSpec{}, fmt.Errorf("command of %d bytes, at most %d", n, maxTrampolineSpec)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return trampolineSpec{}, fmt.Errorf("read the command: %w", err)
	}
	return decodeTrampolineSpec(body)
}

func decodeTrampolineSpec(b []byte) (trampolineSpec, error) {
	d := agentwire.NewDecoder(b, "the command")
	// Every field fits in the spec, which readTrampolineSpec bounds.
	list := func() []string {
		var out []string
		for n := d.Count(maxTrampolineSpec); n > 0; n-- {
			out = append(out, d.Str(maxTrampolineSpec))
		}
		return out
	}
	s := trampolineSpec{path: d.Str(maxTrampolineSpec), dir: d.Str(maxTrampolineSpec), loginUID: d.U32(), argv: list(), env: list()}
	if d.Flag() {
		c := &syscall.Credential{Uid: d.U32(), Gid: d.U32(), NoSetGroups: d.Flag()}
		c.Groups = make([]uint32, d.Count(maxTrampolineSpec))
		for i := range c.Groups {
			c.Groups[i] = d.U32()
		}
		s.cred = c
	}
	if err := d.End(); err != nil {
		return trampolineSpec{}, err
	}
	if !strings.HasPrefix(s.path, "/") || len(s.argv) == 0 {
		return trampolineSpec{}, errors.New("the command has no absolute path or no argv")
	}
	return s, nil
}
