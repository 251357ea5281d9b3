package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// canaryEnv is set in the test process's env; no child env may contain it.
const canaryEnv = "APTL_LAUNCH_TEST_CANARY"

// testLocal returns a Local whose passwd fixture maps user "tester" to this
// process's euid and egid, with shell /bin/sh and home a fresh temp dir, so the
// same tests run as root (credential switch to uid 0) and as a normal user.
func testLocal(t *testing.T) (l *Local, home string) {
	t.Helper()
	home = t.TempDir()
	l = NewLocal()
	if err := useTesterAccount(l, t.TempDir(), home); err != nil {
		t.Fatal(err)
	}
	return l, home
}

// useTesterAccount writes the passwd and group fixtures of testLocal into dir.
func useTesterAccount(l *Local, dir, home string) error {
	pw := fmt.Sprintf("tester:x:%d:%d::%s:/bin/sh\n", os.Geteuid(), os.Getegid(), home)
	l.passwdPath, l.groupPath = filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	if err := os.WriteFile(l.passwdPath, []byte(pw), 0o600); err != nil {
		return err
	}
	return os.WriteFile(l.groupPath, nil, 0o600)
}

func TestResolveAccount(t *testing.T) {
	pw := writeFixture(t, "passwd", passwdFixture)
	grp := writeFixture(t, "group", "sudo:x:27:kali\nusers:x:100:kali,x\n")
	t.Setenv("HOME", "/srv/serverhome")
	tests := []struct {
		name     string
		login    string
		euid     int
		want     Identity
		wantCred *syscall.Credential
	}{
		{name: "root runs login user", login: "kali", euid: 0,
			want:     Identity{User: "kali", UID: 1000, GID: 1000, Home: "/home/kali", Shell: "/usr/bin/zsh", Note: "login user kali", Source: IdentityResolved},
			wantCred: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{1000, 27, 100}}},
		{name: "root, login user absent", login: "ghost", euid: 0,
			want: Identity{User: "root", UID: 0, GID: 0, Home: "/root", Shell: "/bin/bash", Note: "server user (login user absent)", Source: IdentityResolved}},
		{name: "not root", login: "root", euid: 1000,
			want: Identity{User: "kali", UID: 1000, GID: 1000, Home: "/home/kali", Shell: "/usr/bin/zsh", Note: "server user (not root)", Source: IdentityResolved}},
		{name: "not root, login is server user", login: "kali", euid: 1000,
			want: Identity{User: "kali", UID: 1000, GID: 1000, Home: "/home/kali", Shell: "/usr/bin/zsh", Note: "login user kali (server user)", Source: IdentityResolved}},
		{name: "empty shell becomes /bin/sh", login: "noshell", euid: 0,
			want:     Identity{User: "noshell", UID: 1001, GID: 1001, Home: "/home/noshell", Shell: "/bin/sh", Note: "login user noshell", Source: IdentityResolved},
			wantCred: &syscall.Credential{Uid: 1001, Gid: 1001, Groups: []uint32{1001}}},
		{name: "server user without passwd entry", login: "kali", euid: 4242,
			want: Identity{User: "4242", UID: 4242, GID: 4242, Home: "/srv/serverhome", Shell: "/bin/sh", Note: "server user (not root), no passwd entry", Source: IdentityResolved}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveAccount(pw, grp, tt.login, tt.euid, tt.want.GID)
			if err != nil {
				t.Fatal(err)
			}
			if got.id != tt.want {
				t.Errorf("identity = %+v, want %+v", got.id, tt.want)
			}
			if !reflect.DeepEqual(got.cred, tt.wantCred) {
				t.Errorf("cred = %+v, want %+v", got.cred, tt.wantCred)
			}
		})
	}
	t.Run("malformed passwd fails closed as root", func(t *testing.T) {
		bad := writeFixture(t, "passwd", "garbage\n")
		if _, err := resolveAccount(bad, grp, "kali", 0, 0); err == nil {
			t.Fatal("resolveAccount with a malformed passwd file succeeded; want an error, not a fallback to root")
		}
	})
}

func TestNewLocalCommand(t *testing.T) {
	t.Setenv(canaryEnv, "leaked")
	home := t.TempDir()
	user := account{id: Identity{User: "kali", UID: 1000, GID: 1000, Home: home, Shell: "/bin/bash"}}
	root := account{id: Identity{User: "root", UID: 0, GID: 0, Home: filepath.Join(home, "absent"), Shell: "/usr/bin/zsh"}}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()

	tests := []struct {
		name     string
		spec     Spec
		acct     account
		wantArgs []string
		wantEnv  []string
		wantDir  string
	}{
		{name: "login shell on tty", acct: user,
			spec:     Spec{User: "kali", Term: "xterm", TTY: r},
			wantArgs: []string{"-bash"},
			wantEnv:  []string{"HOME=" + home, "USER=kali", "LOGNAME=kali", "SHELL=/bin/bash", "PATH=" + userPath, "TERM=xterm"},
			wantDir:  home},
		{name: "command on pipes, extra env last", acct: user,
			spec:     Spec{User: "kali", Command: "echo hi; exit 3", Env: []string{"APTL_SESSION_ID=s1", "LANG=C.UTF-8"}, Stdin: r, Stdout: w, Stderr: w},
			wantArgs: []string{"/bin/bash", "-c", "echo hi; exit 3"},
			wantEnv:  []string{"HOME=" + home, "USER=kali", "LOGNAME=kali", "SHELL=/bin/bash", "PATH=" + userPath, "APTL_SESSION_ID=s1", "LANG=C.UTF-8"},
			wantDir:  home},
		{name: "root path, missing home", acct: root,
			spec:     Spec{User: "root", TTY: r},
			wantArgs: []string{"-zsh"},
			wantEnv:  []string{"HOME=" + filepath.Join(home, "absent"), "USER=root", "LOGNAME=root", "SHELL=/usr/bin/zsh", "PATH=" + rootPath},
			wantDir:  "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, err := newLocalCommand(tt.spec, tt.acct)
			if err != nil {
				t.Fatal(err)
			}
			if cmd.Path != tt.acct.id.Shell {
				t.Errorf("Path = %q, want %q", cmd.Path, tt.acct.id.Shell)
			}
			if !slices.Equal(cmd.Args, tt.wantArgs) {
				t.Errorf("Args = %q, want %q", cmd.Args, tt.wantArgs)
			}
			if !slices.Equal(cmd.Env, tt.wantEnv) {
				t.Errorf("Env = %q, want %q", cmd.Env, tt.wantEnv)
			}
			for _, kv := range cmd.Env {
				if strings.HasPrefix(kv, canaryEnv+"=") {
					t.Errorf("server env leaked into child env: %s", canaryEnv)
				}
			}
			if cmd.Dir != tt.wantDir {
				t.Errorf("Dir = %q, want %q", cmd.Dir, tt.wantDir)
			}
			spa := cmd.SysProcAttr
			if spa == nil || !spa.Setsid {
				t.Fatalf("SysProcAttr = %+v, want Setsid", spa)
			}
			if tt.spec.TTY != nil {
				if !spa.Setctty || spa.Ctty != 0 {
					t.Errorf("Setctty, Ctty = %v, %d; want true, 0", spa.Setctty, spa.Ctty)
				}
				if cmd.Stdin != tt.spec.TTY || cmd.Stdout != tt.spec.TTY || cmd.Stderr != tt.spec.TTY {
					t.Errorf("stdio is not the TTY on all of fds 0-2")
				}
			} else {
				if spa.Setctty {
					t.Errorf("Setctty set without a TTY")
				}
				if cmd.Stdin != tt.spec.Stdin || cmd.Stdout != tt.spec.Stdout || cmd.Stderr != tt.spec.Stderr {
					t.Errorf("stdio is not the spec's pipes")
				}
			}
			if len(cmd.ExtraFiles) != 0 {
				t.Errorf("ExtraFiles = %d, want none", len(cmd.ExtraFiles))
			}
		})
	}
	t.Run("relative shell refused", func(t *testing.T) {
		acct := account{id: Identity{User: "x", Home: "/", Shell: "bin/sh"}}
		if _, err := newLocalCommand(Spec{User: "x", TTY: r}, acct); err == nil {
			t.Fatal("newLocalCommand with a relative shell succeeded")
		}
	})
}

// TestLaunchFailureClosesFiles checks that Launch owns the spec's fds on every
// failure path, not only on success.
func TestLaunchFailureClosesFiles(t *testing.T) {
	l, _ := testLocal(t)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	badShell := NewLocal()
	badShell.passwdPath = writeFixture(t, "passwd",
		fmt.Sprintf("tester:x:%d:%d::/:/nonexistent/sh\n", os.Geteuid(), os.Getegid()))
	badShell.groupPath = writeFixture(t, "group", "")

	tests := []struct {
		name  string
		l     *Local
		ctx   context.Context
		build func(tty, in, out, errf *os.File) Spec
	}{
		{"tty and pipes", l, context.Background(), func(tty, in, out, errf *os.File) Spec {
			return Spec{User: "tester", TTY: tty, Stdin: in, Stdout: out, Stderr: errf}
		}},
		{"two pipes only", l, context.Background(), func(tty, in, out, errf *os.File) Spec {
			tty.Close()
			return Spec{User: "tester", Stdin: in, Stdout: out}
		}},
		{"bad env", l, context.Background(), func(tty, in, out, errf *os.File) Spec {
			return Spec{User: "tester", TTY: tty, Env: []string{"NOEQUALS"}}
		}},
		{"canceled context", l, canceled, func(tty, in, out, errf *os.File) Spec {
			return Spec{User: "tester", TTY: tty}
		}},
		{"shell does not exist", badShell, context.Background(), func(tty, in, out, errf *os.File) Spec {
			return Spec{User: "tester", Stdin: in, Stdout: out, Stderr: errf}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var files []*os.File
			for range 4 {
				f, err := os.Open(os.DevNull)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, f)
			}
			spec := tt.build(files[0], files[1], files[2], files[3])
			p, err := tt.l.Launch(tt.ctx, spec)
			if err == nil {
				_ = p.Signal(syscall.SIGKILL)
				t.Fatal("Launch succeeded, want an error")
			}
			for _, f := range []*os.File{spec.TTY, spec.Stdin, spec.Stdout, spec.Stderr} {
				if f == nil {
					continue
				}
				if err := f.Close(); !errors.Is(err, os.ErrClosed) {
					t.Errorf("after failed Launch, Close(%s) = %v; want os.ErrClosed (Launch must close it)", f.Name(), err)
				}
			}
			for _, f := range files {
				_ = f.Close()
			}
		})
	}
}

func TestLocalName(t *testing.T) {
	if got := NewLocal().Name(); got != "local" {
		t.Fatalf("Name = %q, want local", got)
	}
}
