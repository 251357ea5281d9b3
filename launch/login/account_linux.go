package login

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/aptl/aptl-kali-capture/launch"
)

const (
	// SystemPasswd and SystemGroup are the account files of the host the
	// launcher runs on: the sidecar's for launch/local, the workload's for agentd.
	SystemPasswd = "/etc/passwd"
	SystemGroup  = "/etc/group"

	// Default PATHs, as Debian's login.defs ENV_SUPATH and ENV_PATH (and OpenSSH's
	// sshd on Debian) set them.
	rootPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	userPath = "/usr/local/bin:/usr/bin:/bin:/usr/games"

	// fallbackShell is the shell of a server user that has no passwd entry, and
	// of an entry whose shell field is empty (as login(1) treats it).
	fallbackShell = "/bin/sh"
)

// ValidLoginName reports whether u is in the portable user name set (POSIX 3.437) that
// useradd accepts: letters, digits, '.', '_', '-', not starting with '-'.
func ValidLoginName(u string) bool {
	if u == "" || len(u) > 32 || u[0] == '-' {
		return false
	}
	for _, c := range []byte(u) {
		if !(c == '.' || c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// Account is a resolved Identity plus the credentials to switch to.
type Account struct {
	ID launch.Identity
	// Cred is nil when the process keeps the server's own credentials.
	Cred *syscall.Credential
}

// ResolveAccount decides nothing about who may log in (the broker did that); it
// only maps the authorized login name to an account. As root, the login user's
// passwd entry is used; otherwise, or if that user is absent, the process runs
// as the server's own user and Identity.Note says why.
func ResolveAccount(passwdPath, groupPath, login string, euid, egid int) (Account, error) {
	if euid != 0 {
		return serverAccount(passwdPath, login, euid, egid, "server user (not root)")
	}
	e, err := LookupPasswd(passwdPath, login)
	if errors.Is(err, ErrUserNotFound) {
		return serverAccount(passwdPath, login, euid, egid, "server user (login user absent)")
	}
	if err != nil {
		return Account{}, fmt.Errorf("login: look up login user: %w", err)
	}
	return SwitchedAccount(groupPath, e, "login user "+e.Name)
}

// SwitchedAccount is the account of passwd entry e with the credentials a
// root launcher switches to: e's uid and gid, and its groups from the group
// file at groupPath. launch/local and agentd share it.
func SwitchedAccount(groupPath string, e PasswdEntry, note string) (Account, error) {
	groups, err := supplementaryGroups(groupPath, e.Name, e.GID)
	if err != nil {
		return Account{}, fmt.Errorf("login: look up groups: %w", err)
	}
	// WARNING: this credential is where a session stops running as root. The
	// child calls setgroups, setgid, then setuid before execve (syscall
	// forkAndExecInChild). Re-verify as root with:
	//	go test -race -run 'TestLocalRunsAsLoginUser|TestServerRunsAsLoginUser' ./launch/local/ ./agentd/
	cred := &syscall.Credential{Uid: uint32(e.UID), Gid: uint32(e.GID), Groups: groups}
	return Account{ID: IdentityOf(e, note), Cred: cred}, nil
}

// serverAccount is the account of the server's own effective user: its passwd
// entry if there is one, else its uid with fallbackShell and the server's home.
func serverAccount(passwdPath, login string, euid, egid int, note string) (Account, error) {
	e, err := LookupPasswdByUID(passwdPath, euid)
	switch {
	case err == nil:
		if e.Name == login {
			note = "login user " + login + " (server user)"
		}
		return Account{ID: IdentityOf(e, note)}, nil
	case errors.Is(err, ErrUserNotFound):
		home, herr := os.UserHomeDir()
		if herr != nil || home == "" {
			home = "/"
		}
		return Account{ID: launch.Identity{
			User: strconv.Itoa(euid), UID: euid, GID: egid,
			Home: home, Shell: fallbackShell, Note: note + ", no passwd entry", Source: launch.IdentityResolved,
		}}, nil
	default:
		return Account{}, fmt.Errorf("login: look up server user: %w", err)
	}
}

func IdentityOf(e PasswdEntry, note string) launch.Identity {
	shell := e.Shell
	if shell == "" {
		shell = fallbackShell
	}
	return launch.Identity{User: e.Name, UID: e.UID, GID: e.GID, Home: e.Home, Shell: shell, Note: note, Source: launch.IdentityResolved}
}

// Command builds, without starting it, the command for spec as acct.
// The child gets only the env built here, none of the server's own. The
// agent's server (agentd/agentspawn_linux.go) builds its sessions with it too,
// so both adapters start the same login shell the same way.
func Command(spec launch.Spec, acct Account) (*exec.Cmd, error) {
	id := acct.ID
	if !filepath.IsAbs(id.Shell) {
		return nil, fmt.Errorf("login: shell of %s is not an absolute path", id.User)
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
	// Setsid makes the child a session and process-group leader, so Process.Signal
	// reaches its group as -pid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: acct.Cred}
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
