// Package launchtest holds the helpers the tests of the launch adapters
// and the agent share to start a session through a launch.Launcher: the
// pipes of an exec session and a bounded wait for its exit. Only tests
// import it.
package launchtest

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
)

// PipeSpec makes the three pipes of an exec session; it returns the spec
// (the child's ends) and the server's ends.
func PipeSpec(t testing.TB, user, command string) (spec launch.Spec, stdin, stdout, stderr *os.File) {
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
	return launch.Spec{User: user, Command: command, Stdin: inR, Stdout: outW, Stderr: errW}, inW, outR, errR
}

// WaitExit calls Wait, failing the test if the process does not exit in time.
func WaitExit(t testing.TB, p launch.Process) launch.Exit {
	t.Helper()
	type result struct {
		e   launch.Exit
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
	case <-time.After(testutil.FailAfter):
		_ = p.Signal(syscall.SIGKILL)
		t.Fatal("process did not exit")
		return launch.Exit{}
	}
}
