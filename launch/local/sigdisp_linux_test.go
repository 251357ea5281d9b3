package local

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/login"
)

// helperEnv selects the re-executed helper role of the test binary.
const helperEnv = "APTL_LAUNCH_TEST_HELPER"

func TestMain(m *testing.M) {
	// Host the login trampoline, as the sidecar's main does: Local starts
	// every session of these tests through it.
	login.TrampolineMain()
	if os.Getenv(helperEnv) == "sigdisp" {
		os.Exit(sigDispHelper())
	}
	os.Exit(m.Run())
}

// sigMasks are the signal masks of one process, from /proc/<pid>/status.
type sigMasks struct {
	SigBlk, SigIgn uint64
}

// sigDispResult is what the helper reports on fd 3.
type sigDispResult struct {
	InheritedIntIgnored bool     // the starter's SIG_IGN for SIGINT reached the helper
	Control             sigMasks // a child started by plain os/exec before New
	Child               sigMasks // a child started through Local
	Err                 string
}

func sigBit(sig syscall.Signal) uint64 { return 1 << (uint(sig) - 1) }

// TestLocalSignalDispositions starts the test binary from a shell that ignores
// SIGINT, the state `cmd &` in a non-interactive shell leaves; the helper also
// ignores SIGQUIT itself. A plain child shows the problem (both ignored), a
// child started through Local must show neither ignored and an empty mask.
func TestLocalSignalDispositions(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.FailAfter)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `trap '' INT; exec "$0"`, exe)
	// A -race binary sleeps 1s at exit unless told not to.
	cmd.Env = append(os.Environ(), helperEnv+"=sigdisp", "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	cmd.ExtraFiles = []*os.File{w} // fd 3
	out, err := cmd.CombinedOutput()
	w.Close()
	if err != nil {
		t.Fatalf("helper: %v; output: %s", err, out)
	}
	var res sigDispResult
	if err := json.NewDecoder(r).Decode(&res); err != nil {
		t.Fatalf("helper result: %v; output: %s", err, out)
	}
	if res.Err != "" {
		t.Fatalf("helper: %s", res.Err)
	}
	both := sigBit(syscall.SIGINT) | sigBit(syscall.SIGQUIT)
	// Preconditions: without them the test could not fail.
	if !res.InheritedIntIgnored {
		t.Fatal("helper did not inherit SIG_IGN for SIGINT; the test setup is broken")
	}
	if res.Control.SigIgn&both != both {
		t.Fatalf("control child SigIgn = %#x, want INT and QUIT ignored (the problem Local fixes)", res.Control.SigIgn)
	}
	if res.Child.SigIgn != 0 {
		t.Errorf("child started by Local: SigIgn = %#x, want 0 (INT %v, QUIT %v)", res.Child.SigIgn,
			res.Child.SigIgn&sigBit(syscall.SIGINT) != 0, res.Child.SigIgn&sigBit(syscall.SIGQUIT) != 0)
	}
	if res.Child.SigBlk != 0 {
		t.Errorf("child started by Local: SigBlk = %#x, want 0", res.Child.SigBlk)
	}
}

// sigDispHelper runs in the re-executed test binary; it writes a
// sigDispResult to fd 3 and returns the exit code.
func sigDispHelper() int {
	res := sigDispResult{InheritedIntIgnored: signal.Ignored(syscall.SIGINT)}
	if err := sigDispMeasure(&res); err != nil {
		res.Err = err.Error()
	}
	if err := json.NewEncoder(os.NewFile(3, "result")).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

func sigDispMeasure(res *sigDispResult) error {
	signal.Ignore(syscall.SIGQUIT)
	control, err := exec.Command("cat", "/proc/self/status").Output()
	if err != nil {
		return fmt.Errorf("control child: %w", err)
	}
	if res.Control, err = parseSigMasks(string(control)); err != nil {
		return err
	}

	l := New() // must be the first New in this process
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	inW.Close()
	defer outR.Close()
	dir, err := os.MkdirTemp("", "launch-sigdisp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := useTesterAccount(l, dir, dir); err != nil {
		return err
	}
	p, err := l.Launch(context.Background(), launch.Spec{User: "tester", Command: "cat /proc/self/status",
		Stdin: inR, Stdout: outW, Stderr: outW})
	if err != nil {
		return err
	}
	status, err := io.ReadAll(outR)
	if err != nil {
		return err
	}
	if e, err := p.Wait(); err != nil || e != (launch.Exit{}) {
		return fmt.Errorf("child: exit %+v, %v: %s", e, err, status)
	}
	res.Child, err = parseSigMasks(string(status))
	return err
}

func parseSigMasks(status string) (sigMasks, error) {
	var m sigMasks
	found := 0
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "SigBlk" && k != "SigIgn") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return m, fmt.Errorf("%s: %w", k, err)
		}
		if k == "SigBlk" {
			m.SigBlk = n
		} else {
			m.SigIgn = n
		}
		found++
	}
	if found != 2 {
		return m, fmt.Errorf("status lacks SigBlk or SigIgn: %q", status)
	}
	return m, nil
}
