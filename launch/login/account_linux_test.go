package login

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
)

// canaryEnv is set in the test process's env; no child env may contain it.
const canaryEnv = "APTL_LAUNCH_TEST_CANARY"

func TestResolveAccount(t *testing.T) {
	pw := testutil.WriteFixture(t, "passwd", passwdFixture)
	grp := testutil.WriteFixture(t, "group", "sudo:x:27:kali\nusers:x:100:kali,x\n")
	t.Setenv("HOME", "/srv/serverhome")
	tests := []struct {
		name     string
		login    string
		euid     int
		want     launch.Identity
		wantCred *syscall.Credential
	}{
		{name: "root runs login user", login: "kali", euid: 0,
			want:     launch.Identity{User: "kali", UID: 1000, GID: 1000, Home: "/home/kali", Shell: "/usr/bin/zsh", Note: "login user kali", Source: launch.IdentityResolved},
			wantCred: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{1000, 27, 100}}},
		{name: "root, login user absent", login: "ghost", euid: 0,
			want: launch.Identity{User: "root", UID: 0, GID: 0, Home: "/root", Shell: "/bin/bash", Note: "server user (login user absent)", Source: launch.IdentityResolved}},
		{name: "not root", login: "root", euid: 1000,
			want: launch.Identity{User: "kali", UID: 1000, GID: 1000, Home: "/home/kali", Shell: "/usr/bin/zsh", Note: "server user (not root)", Source: launch.IdentityResolved}},
		{name: "not root, login is server user", login: "kali", euid: 1000,
			want: launch.Identity{User: "kali", UID: 1000, GID: 1000, Home: "/home/kali", Shell: "/usr/bin/zsh", Note: "login user kali (server user)", Source: launch.IdentityResolved}},
		{name: "empty shell becomes /bin/sh", login: "noshell", euid: 0,
			want:     launch.Identity{User: "noshell", UID: 1001, GID: 1001, Home: "/home/noshell", Shell: "/bin/sh", Note: "login user noshell", Source: launch.IdentityResolved},
			wantCred: &syscall.Credential{Uid: 1001, Gid: 1001, Groups: []uint32{1001}}},
		{name: "server user without passwd entry", login: "kali", euid: 4242,
			want: launch.Identity{User: "4242", UID: 4242, GID: 4242, Home: "/srv/serverhome", Shell: "/bin/sh", Note: "server user (not root), no passwd entry", Source: launch.IdentityResolved}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveAccount(pw, grp, tt.login, tt.euid, tt.want.GID)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.want {
				t.Errorf("identity = %+v, want %+v", got.ID, tt.want)
			}
			if !reflect.DeepEqual(got.Cred, tt.wantCred) {
				t.Errorf("cred = %+v, want %+v", got.Cred, tt.wantCred)
			}
		})
	}
	t.Run("malformed passwd fails closed as root", func(t *testing.T) {
		bad := testutil.WriteFixture(t, "passwd", "garbage\n")
		if _, err := ResolveAccount(bad, grp, "kali", 0, 0); err == nil {
			t.Fatal("resolveAccount with a malformed passwd file succeeded; want an error, not a fallback to root")
		}
	})
}

func TestNewLocalCommand(t *testing.T) {
	t.Setenv(canaryEnv, "leaked")
	home := t.TempDir()
	user := Account{ID: launch.Identity{User: "kali", UID: 1000, GID: 1000, Home: home, Shell: "/bin/bash"}}
	root := Account{ID: launch.Identity{User: "root", UID: 0, GID: 0, Home: filepath.Join(home, "absent"), Shell: "/usr/bin/zsh"}}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()

	tests := []struct {
		name     string
		spec     launch.Spec
		acct     Account
		wantArgs []string
		wantEnv  []string
		wantDir  string
	}{
		{name: "login shell on tty", acct: user,
			spec:     launch.Spec{User: "kali", Term: "xterm", TTY: r},
			wantArgs: []string{"-bash"},
			wantEnv:  []string{"HOME=" + home, "USER=kali", "LOGNAME=kali", "SHELL=/bin/bash", "PATH=" + userPath, "TERM=xterm"},
			wantDir:  home},
		{name: "command on pipes, extra env last", acct: user,
			spec:     launch.Spec{User: "kali", Command: "echo hi; exit 3", Env: []string{"APTL_SESSION_ID=s1", "LANG=C.UTF-8"}, Stdin: r, Stdout: w, Stderr: w},
			wantArgs: []string{"/bin/bash", "-c", "echo hi; exit 3"},
			wantEnv:  []string{"HOME=" + home, "USER=kali", "LOGNAME=kali", "SHELL=/bin/bash", "PATH=" + userPath, "APTL_SESSION_ID=s1", "LANG=C.UTF-8"},
			wantDir:  home},
		{name: "root path, missing home", acct: root,
			spec:     launch.Spec{User: "root", TTY: r},
			wantArgs: []string{"-zsh"},
			wantEnv:  []string{"HOME=" + filepath.Join(home, "absent"), "USER=root", "LOGNAME=root", "SHELL=/usr/bin/zsh", "PATH=" + rootPath},
			wantDir:  "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, err := Command(tt.spec, tt.acct)
			if err != nil {
				t.Fatal(err)
			}
			if cmd.Path != tt.acct.ID.Shell {
				t.Errorf("Path = %q, want %q", cmd.Path, tt.acct.ID.Shell)
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
		acct := Account{ID: launch.Identity{User: "x", Home: "/", Shell: "bin/sh"}}
		if _, err := Command(launch.Spec{User: "x", TTY: r}, acct); err == nil {
			t.Fatal("Command with a relative shell succeeded")
		}
	})
}
