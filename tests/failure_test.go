package tests

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/launch"
)

// failingLauncher refuses every launch, like an adapter whose workload side
// is gone before the session starts.
type failingLauncher struct{ launch.Launcher }

func (failingLauncher) Launch(context.Context, launch.Spec) (launch.Process, error) {
	return nil, errors.New("adapter unavailable")
}

// losingLauncher starts the process but loses track of it: Wait reports an
// error instead of an exit status, as an agent whose connection broke does.
type losingLauncher struct{ launch.Launcher }

func (l losingLauncher) Launch(ctx context.Context, spec launch.Spec) (launch.Process, error) {
	p, err := l.Launcher.Launch(ctx, spec)
	return lostProcess{p}, err
}

type lostProcess struct{ launch.Process }

func (p lostProcess) Wait() (launch.Exit, error) {
	p.Process.Wait()
	return launch.Exit{}, errors.New("launcher connection lost")
}

func TestLaunchFailureIsRecordedAndRefused(t *testing.T) {
	h := newHarness(t, withLauncher(func(l launch.Launcher) launch.Launcher { return failingLauncher{l} }))
	res := rawExec(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "nolaunch"}, "echo SHOULD_NOT_RUN")
	if !res.refused() || !strings.Contains(res.stderr, "could not start the session process") {
		t.Fatalf("got %+v, want a refused exec with a reason", res)
	}
	if strings.Contains(res.stderr, "adapter unavailable") {
		t.Error("the internal cause reached the client")
	}
	h.waitIdle(t)
	if r := timingHeaders(t, h.sessionDir("_unbound", "nolaunch"))["APTL_CLOSE_REASON"]; r != "launch-failed" {
		t.Errorf("close reason = %q, want launch-failed", r)
	}
}

func TestLauncherLost(t *testing.T) {
	h := newHarness(t, withLauncher(func(l launch.Launcher) launch.Launcher { return losingLauncher{l} }))
	res := rawExec(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "lost-1"}, "echo ran")
	if !res.started || res.stdout != "ran\n" {
		t.Fatalf("got %+v", res)
	}
	if res.status != 255 || !strings.Contains(res.stderr, "lost the session process") {
		t.Errorf("status %d stderr %q, want 255 and a reason", res.status, res.stderr)
	}
	h.waitIdle(t)
	hdr := timingHeaders(t, h.sessionDir("_unbound", "lost-1"))
	if hdr["APTL_CLOSE_REASON"] != "launcher-lost" || hdr["EXIT_CODE"] != "255" {
		t.Errorf("record: %v", hdr)
	}
}

// TestFullDiskStopsDelivery fills a small tmpfs capture root with output:
// once the recorder cannot write, the session ends with close reason
// disk-full, the client never receives a byte that was not recorded, and
// the record is finalized on the session's reserve and verifies.
func TestFullDiskStopsDelivery(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs as the capture root")
	}
	root := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", root).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", root).Run() })

	h := newHarness(t, withCaptureRoot(root))
	res := rawExec(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "full-1"}, "head -c 4000000 /dev/zero | tr '\\0' x")
	h.waitIdle(t)
	if (res.status <= 0 && res.signal == "") || !strings.Contains(res.stderr, "recording failed") {
		t.Errorf("status %d signal %q stderr %q, want a failure the client is told about", res.status, res.signal, res.stderr)
	}
	ts, err := os.ReadFile(filepath.Join(h.sessionDir("_unbound", "full-1"), "pty", "typescript"))
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := strings.Cut(string(ts), "]\n")
	if len(res.stdout) == 0 || len(res.stdout) > strings.Count(body, "x") {
		t.Errorf("client received %d bytes, the record holds %d: delivery must never pass the record", len(res.stdout), strings.Count(body, "x"))
	}
	if !strings.Contains(h.logs.String(), "reason=disk-full") || !strings.Contains(res.stderr, "capture volume (disk) has no space left") {
		t.Errorf("the log and the client (%q) do not say the session ended on a full disk", res.stderr)
	}
	// The session's reserve held the closing records: finalized, verifying.
	checkFinalized(t, h.sessionDir("_unbound", "full-1"), h.hostKey, vocab.CloseDiskFull)
}
