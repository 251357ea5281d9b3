package tests

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestServePortTaken holds the SSH listen address with another listener, as
// a workload process sharing the sidecar's network namespace could, and
// runs serve on it: the log names the address and says sessions are not
// recorded, readiness says listen=taken, health fails with that reason and
// the address, and after --port-taken-wait serve exits with status 4.
func TestServePortTaken(t *testing.T) {
	t.Parallel() // see parallel_test.go
	tk := serveOnTakenPort(t, "3s")
	defer tk.squatter.Close()
	bin, addr, ready, logs := tk.bin, tk.addr, tk.ready, tk.logs
	exited := make(chan error, 1)
	go func() { exited <- tk.srv.Wait() }()
	out, err := exec.Command(bin, "health", "--ready-file", ready, "--listen", addr).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "listen=taken") || !strings.Contains(string(out), addr) ||
		!strings.Contains(string(out), "not being recorded") {
		t.Errorf("health while the port is taken: %v\n%s", err, out)
	}

	select {
	case err = <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not give up on the taken port; logs:\n%s", logs.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 4 {
		t.Errorf("serve's exit with the port taken: %v, want exit status 4", err)
	}
	if l := logs.String(); !strings.Contains(l, addr) || !strings.Contains(l, "sessions are NOT being recorded") {
		t.Errorf("serve's log does not name the address and say sessions are not recorded:\n%s", l)
	}
}

// TestServePortFreedDuringWait: when the holder lets go within
// --port-taken-wait, serve listens and readiness says listen=ok.
func TestServePortFreedDuringWait(t *testing.T) {
	t.Parallel() // see parallel_test.go
	tk := serveOnTakenPort(t, "30s")
	bin, addr, ready, logs := tk.bin, tk.addr, tk.ready, tk.logs
	tk.squatter.Close()
	waitFor(t, 15*time.Second, "readiness listen=ok", func() bool {
		b, _ := os.ReadFile(ready)
		return strings.Contains(string(b), "listen=ok")
	})
	if out, err := exec.Command(bin, "health", "--ready-file", ready, "--listen", addr).CombinedOutput(); err != nil {
		t.Errorf("health after the port was freed: %v\n%s\nserve logs:\n%s", err, out, logs.String())
	}
}

// takenPort is a serve started on an address a squatter already holds,
// once its readiness file says listen=taken.
type takenPort struct {
	bin, addr, ready string
	squatter         net.Listener
	srv              *exec.Cmd
	logs             *testutil.LockedBuffer
}

func serveOnTakenPort(t *testing.T, wait string) *takenPort {
	t.Helper()
	tk := &takenPort{bin: buildForLiveTest(t), logs: &testutil.LockedBuffer{}}
	var err error
	if tk.squatter, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	tk.addr = tk.squatter.Addr().String()
	work := t.TempDir()
	tk.ready = filepath.Join(work, "ready")
	tk.srv = exec.Command(tk.bin, "serve", "--listen", tk.addr, "--ready-file", tk.ready, "--port-taken-wait", wait)
	tk.srv.Dir = work
	tk.srv.Stdout, tk.srv.Stderr = tk.logs, tk.logs
	if err := tk.srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tk.srv.Process.Kill() })
	waitFor(t, 10*time.Second, "readiness listen=taken", func() bool {
		b, _ := os.ReadFile(tk.ready)
		return strings.Contains(string(b), "listen=taken") && strings.Contains(string(b), "listen_addr="+tk.addr)
	})
	return tk
}
