package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
)

// canaryEnv is set in the test process's env; no child env may contain it.
const canaryEnv = "APTL_LAUNCH_TEST_CANARY"

// testLocal returns a Local whose passwd fixture maps user "tester" to this
// process's euid and egid, with shell /bin/sh and home a fresh temp dir, so the
// same tests run as root (credential switch to uid 0) and as a normal user.
func testLocal(t *testing.T) (l *Local, home string) {
	t.Helper()
	home = t.TempDir()
	l = New()
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

// TestLaunchFailureClosesFiles checks that Launch owns the spec's fds on every
// failure path, not only on success.
func TestLaunchFailureClosesFiles(t *testing.T) {
	l, _ := testLocal(t)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	badShell := New()
	badShell.passwdPath = testutil.WriteFixture(t, "passwd",
		fmt.Sprintf("tester:x:%d:%d::/:/nonexistent/sh\n", os.Geteuid(), os.Getegid()))
	badShell.groupPath = testutil.WriteFixture(t, "group", "")

	tests := []struct {
		name  string
		l     *Local
		ctx   context.Context
		build func(tty, in, out, errf *os.File) launch.Spec
	}{
		{"tty and pipes", l, context.Background(), func(tty, in, out, errf *os.File) launch.Spec {
			return launch.Spec{User: "tester", TTY: tty, Stdin: in, Stdout: out, Stderr: errf}
		}},
		{"two pipes only", l, context.Background(), func(tty, in, out, errf *os.File) launch.Spec {
			tty.Close()
			return launch.Spec{User: "tester", Stdin: in, Stdout: out}
		}},
		{"bad env", l, context.Background(), func(tty, in, out, errf *os.File) launch.Spec {
			return launch.Spec{User: "tester", TTY: tty, Env: []string{"NOEQUALS"}}
		}},
		{"canceled context", l, canceled, func(tty, in, out, errf *os.File) launch.Spec {
			return launch.Spec{User: "tester", TTY: tty}
		}},
		{"shell does not exist", badShell, context.Background(), func(tty, in, out, errf *os.File) launch.Spec {
			return launch.Spec{User: "tester", Stdin: in, Stdout: out, Stderr: errf}
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
	if got := New().Name(); got != "local" {
		t.Fatalf("Name = %q, want local", got)
	}
}
