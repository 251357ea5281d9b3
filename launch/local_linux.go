package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

const (
	systemPasswd = "/etc/passwd"
	systemGroup  = "/etc/group"

	// Default PATHs, as Debian's login.defs ENV_SUPATH and ENV_PATH (and OpenSSH's
	// sshd on Debian) set them.
	rootPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	userPath = "/usr/local/bin:/usr/bin:/bin:/usr/games"

	// fallbackShell is the shell of a server user that has no passwd entry, and
	// of an entry whose shell field is empty (as login(1) treats it).
	fallbackShell = "/bin/sh"
)

// Local is the "local" adapter: the session process runs in the server's own
// namespaces. It is for development, tests and single-host use; against a root
// workload it is not authentic, which is why the record names the adapter.
type Local struct {
	// passwdPath and groupPath are set by NewLocal and never change; tests point
	// them at fixtures.
	passwdPath, groupPath string
}

var _ Launcher = (*Local)(nil)

// NewLocal returns the local adapter (in launch/local_linux.go; linux-only code goes in _linux.go files).
//
// The first call also undoes inherited SIG_IGN dispositions for the processes
// it will start (see catchIgnoredSignals). Signals the server ignores with
// signal.Ignore after that call would again be inherited by session processes.
func NewLocal() *Local {
	catchIgnoredSignalsOnce.Do(catchIgnoredSignals)
	return &Local{passwdPath: systemPasswd, groupPath: systemGroup}
}

// Name implements Launcher.
func (l *Local) Name() string { return "local" }

// Launch implements Launcher. It resolves whom to run as, builds the command and
// starts it; ctx bounds only this start.
func (l *Local) Launch(ctx context.Context, spec Spec) (Process, error) {
	// Ownership of the spec's fds transfers here. After Start the child holds its
	// own copies on fds 0-2, so this process's copies are closed on every path:
	// the server must keep no reference to the slave.
	defer spec.closeFiles()

	if err := spec.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("launch: %w", context.Cause(ctx))
	}
	acct, err := resolveAccount(l.passwdPath, l.groupPath, spec.User, os.Geteuid(), os.Getegid())
	if err != nil {
		return nil, err
	}
	cmd, err := newLocalCommand(spec, acct)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("launch: %w", context.Cause(ctx))
	}
	// The error names the shell path or home directory, never argv or env.
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("launch: start shell: %w", err)
	}
	return newLocalProcess(cmd, acct.id), nil
}

// account is a resolved Identity plus the credentials to switch to.
type account struct {
	id Identity
	// cred is nil when the process keeps the server's own credentials.
	cred *syscall.Credential
}

// resolveAccount decides nothing about who may log in (the broker did that); it
// only maps the authorized login name to an account. As root, the login user's
// passwd entry is used; otherwise, or if that user is absent, the process runs
// as the server's own user and Identity.Note says why.
func resolveAccount(passwdPath, groupPath, login string, euid, egid int) (account, error) {
	if euid != 0 {
		return serverAccount(passwdPath, login, euid, egid, "server user (not root)")
	}
	e, err := lookupPasswd(passwdPath, login)
	if errors.Is(err, errUserNotFound) {
		return serverAccount(passwdPath, login, euid, egid, "server user (login user absent)")
	}
	if err != nil {
		return account{}, fmt.Errorf("launch: look up login user: %w", err)
	}
	return switchedAccount(groupPath, e, "login user "+e.Name)
}

// switchedAccount is the account of passwd entry e with the credentials a
// root launcher switches to: e's uid and gid, and its groups from the group
// file at groupPath. Local and the agent's server (agentspawn_linux.go) share it.
func switchedAccount(groupPath string, e passwdEntry, note string) (account, error) {
	groups, err := supplementaryGroups(groupPath, e.Name, e.GID)
	if err != nil {
		return account{}, fmt.Errorf("launch: look up groups: %w", err)
	}
	// WARNING: this credential is where a session stops running as root. The
	// child calls setgroups, setgid, then setuid before execve (syscall
	// forkAndExecInChild). Re-verify as root with:
	//	go test -race -run 'TestLocalRunsAsLoginUser|TestAgentServerRunsAsLoginUser' ./launch/
	cred := &syscall.Credential{Uid: uint32(e.UID), Gid: uint32(e.GID), Groups: groups}
	return account{id: identityOf(e, note), cred: cred}, nil
}

// serverAccount is the account of the server's own effective user: its passwd
// entry if there is one, else its uid with fallbackShell and the server's home.
func serverAccount(passwdPath, login string, euid, egid int, note string) (account, error) {
	e, err := lookupPasswdByUID(passwdPath, euid)
	switch {
	case err == nil:
		if e.Name == login {
			note = "login user " + login + " (server user)"
		}
		return account{id: identityOf(e, note)}, nil
	case errors.Is(err, errUserNotFound):
		home, herr := os.UserHomeDir()
		if herr != nil || home == "" {
			home = "/"
		}
		return account{id: Identity{
			User: strconv.Itoa(euid), UID: euid, GID: egid,
			Home: home, Shell: fallbackShell, Note: note + ", no passwd entry", Source: IdentityResolved,
		}}, nil
	default:
		return account{}, fmt.Errorf("launch: look up server user: %w", err)
	}
}

func identityOf(e passwdEntry, note string) Identity {
	shell := e.Shell
	if shell == "" {
		shell = fallbackShell
	}
	return Identity{User: e.Name, UID: e.UID, GID: e.GID, Home: e.Home, Shell: shell, Note: note, Source: IdentityResolved}
}

// newLocalCommand builds, without starting it, the command for spec as acct.
// The child gets only the env built here, none of the server's own. The
// agent's server (agentspawn_linux.go) builds its sessions with it too, so
// both adapters start the same login shell the same way.
func newLocalCommand(spec Spec, acct account) (*exec.Cmd, error) {
	id := acct.id
	if !filepath.IsAbs(id.Shell) {
		return nil, fmt.Errorf("launch: shell of %s is not an absolute path", id.User)
	}
	args := []string{"-" + filepath.Base(id.Shell)} // login(1) convention: argv[0] "-bash" means login shell
	if spec.Command != "" {
		args = []string{id.Shell, "-c", spec.Command}
	}
	path := userPath
	if id.UID == 0 {
		path = rootPath
	}
	env := []string{
		"HOME=" + id.Home,
		"USER=" + id.User,
		"LOGNAME=" + id.User,
		"SHELL=" + id.Shell,
		"PATH=" + path,
	}
	if spec.Term != "" {
		env = append(env, "TERM="+spec.Term)
	}
	// The broker's accepted env comes last. exec.Cmd keeps the last of duplicate
	// keys, so which keys may override the ones above is the broker's policy.
	env = append(env, spec.Env...)

	dir := "/"
	if fi, err := os.Stat(id.Home); err == nil && fi.IsDir() && filepath.IsAbs(id.Home) {
		dir = id.Home
	}
	cmd := &exec.Cmd{Path: id.Shell, Args: args, Env: env, Dir: dir}
	// Setsid makes the child a session and process-group leader, so Signal
	// reaches its group as -pid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: acct.cred}
	if spec.TTY != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.TTY, spec.TTY, spec.TTY
		// Ctty is a child fd: 0 is the TTY, which becomes the controlling terminal
		// of the new session (TIOCSCTTY after setsid).
		cmd.SysProcAttr.Setctty = true
		cmd.SysProcAttr.Ctty = 0
	} else {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.Stdin, spec.Stdout, spec.Stderr
	}
	return cmd, nil
}
