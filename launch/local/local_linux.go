// Package local is the "local" launch adapter: the session's login shell
// runs in the sidecar's own namespaces (launch/login starts it).
package local

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

// Local is the "local" adapter: the session process runs in the server's own
// namespaces. It is for development, tests and single-host use; against a root
// workload it is not authentic, which is why the record names the adapter.
type Local struct {
	// passwdPath and groupPath are set by New and never change; tests point
	// them at fixtures (NewWithAccountFiles).
	passwdPath, groupPath string
}

var _ launch.Launcher = (*Local)(nil)

// New returns the local adapter.
//
// The first call also undoes inherited SIG_IGN dispositions for the processes
// it will start (login.CatchIgnoredSignals). Signals the server ignores with
// signal.Ignore after that call would again be inherited by session processes.
func New() *Local { return NewWithAccountFiles(login.SystemPasswd, login.SystemGroup) }

// NewWithAccountFiles is New reading accounts from passwdPath and
// groupPath (passwd(5) and group(5) files): New names the system's, the
// tests their fixture accounts.
func NewWithAccountFiles(passwdPath, groupPath string) *Local {
	login.CatchIgnoredSignals()
	return &Local{passwdPath: passwdPath, groupPath: groupPath}
}

// Name implements Launcher.
func (l *Local) Name() string { return "local" }

// Launch implements Launcher. It resolves whom to run as, builds the command and
// starts it; ctx bounds only this start.
func (l *Local) Launch(ctx context.Context, spec launch.Spec) (launch.Process, error) {
	// Ownership of the spec's fds transfers here. After Start the child holds its
	// own copies on fds 0-2, so this process's copies are closed on every path:
	// the server must keep no reference to the slave.
	defer spec.CloseFiles()

	if err := spec.Check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: %w", context.Cause(ctx))
	}
	if err := l.checkUserExists(spec.User); err != nil {
		return nil, err
	}
	acct, err := login.ResolveAccount(l.passwdPath, l.groupPath, spec.User, os.Geteuid(), os.Getegid())
	if err != nil {
		return nil, err
	}
	cmd, err := login.Command(spec, acct)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: %w", context.Cause(ctx))
	}
	// Through the login trampoline when this program hosts it (the
	// sidecar's main does): the session gets an audit session of its own.
	return login.Start(cmd, acct)
}

// ErrUnknownUser is a login name without a passwd entry, on a root server.
var ErrUnknownUser = errors.New("login user has no account")

// UserExists reports whether a session for name would run as name: as
// root, only when it has a passwd entry. A server that is not root runs
// every session as its own user (the development default, and the record's
// APTL_RUN_AS_NOTE says so), so every name is accepted there.
func (l *Local) UserExists(name string) bool {
	return l.checkUserExists(name) == nil
}

// checkUserExists refuses, on a root server, a name without a passwd
// entry: running it as root instead, as before, gave a client that named a
// missing account a root shell.
func (l *Local) checkUserExists(name string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	_, err := login.LookupPasswd(l.passwdPath, name)
	if errors.Is(err, login.ErrUserNotFound) {
		return fmt.Errorf("local: %w: %q", ErrUnknownUser, name)
	}
	if err != nil {
		return fmt.Errorf("local: look up login user: %w", err)
	}
	return nil
}
