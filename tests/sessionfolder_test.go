package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// recoverUnfinalized lists the sessions under root and recovers those that
// need it, as serve's startup does (recorder.ListSessions, then
// recorder.RecoverSessions), returning the directories it recovered and the
// errors joined.
func recoverUnfinalized(root string, opts recorder.Options) ([]string, error) {
	sessions, err := recorder.ListSessions(root)
	errs := []error{err}
	var recovered []string
	recorder.RecoverSessions(context.Background(), sessions, opts, func(o recorder.RecoveryOutcome) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.Dir, o.Err))
			return
		}
		recovered = append(recovered, o.Dir)
	})
	return recovered, errors.Join(errs...)
}

// TestDiskFullAtSessionStart starts a session on a capture root that is
// already full: the session is refused with a reason, no folder is left
// without an open record (so the id is not used up, and there is nothing
// for verify to print blank ids of), and the restart's recovery scan finds
// nothing to complain about.
func TestDiskFullAtSessionStart(t *testing.T) {
	// Room for a session's files and its 64 KiB reserve of closing space
	// (recorder/reserve.go) once the filler is gone.
	root := mountSmallTmpfs(t, "1m")
	fillDisk(t, filepath.Join(root, "filler"))

	h := newHarness(t, withCaptureRoot(root))
	c := h.dial(t)
	env := map[string]string{"APTL_SESSION_ID": "full-at-start"}
	res := rawExec(t, c, env, "echo SHOULD_NOT_RUN")
	h.waitIdle(t)
	if !res.refused() || !strings.Contains(res.stderr, "recording is unavailable") {
		t.Fatalf("got %+v, want a refused session with a reason", res)
	}
	// The sidecar's own folder (the reserves' home) is not a session's.
	var sessions []string
	all, _ := filepath.Glob(filepath.Join(root, "*", "*"))
	for _, s := range all {
		if run := filepath.Base(filepath.Dir(s)); !recorder.ReservedRunID(run) {
			sessions = append(sessions, s)
		}
	}
	if len(sessions) != 0 {
		t.Errorf("session folders left behind on a full disk: %v", sessions)
	}
	hostKey, err := broker.LoadOrCreateKey(filepath.Join(h.stateDir, broker.HostKeyFile), "test host")
	if err != nil {
		t.Fatal(err)
	}
	recovered, err := recoverUnfinalized(root, recorder.Options{Signer: hostKey})
	if err != nil || len(recovered) != 0 {
		t.Errorf("restart recovery: recovered %v, err %v; want nothing to do", recovered, err)
	}

	// Once there is room again the same id records: it was not used up.
	if err := os.Remove(filepath.Join(root, "filler")); err != nil {
		t.Fatal(err)
	}
	if res := rawExec(t, c, env, "echo ran"); !res.started || res.stdout != "ran\n" {
		t.Fatalf("after freeing space: %+v", res)
	}
	h.waitIdle(t)
	if hdr := timingHeaders(t, h.sessionDir("_unbound", "full-at-start")); hdr["APTL_CLOSE_REASON"] != "shell-exited" {
		t.Errorf("retried session's record: %v", hdr)
	}
}

// TestPlantedRunSymlinkRefused plants <root>/<run_id> as a symlink to a
// folder outside the capture root: the session is refused with a reason
// and nothing is written outside the root.
func TestPlantedRunSymlinkRefused(t *testing.T) {
	h := newHarness(t)
	outside := t.TempDir()
	if err := os.MkdirAll(h.root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(h.root, "planted")); err != nil {
		t.Fatal(err)
	}
	res := rawExec(t, h.dial(t), map[string]string{"APTL_RUN_ID": "planted", "APTL_SESSION_ID": "s1"}, "echo SHOULD_NOT_RUN")
	h.waitIdle(t)
	if !res.refused() || res.stdout != "" {
		t.Fatalf("session ran through a planted symlink: %+v", res)
	}
	if !strings.Contains(res.stderr, "run planted is a symlink or not a directory") {
		t.Errorf("stderr = %q, want a clear refusal", res.stderr)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("records landed outside the capture root: %v", entries)
	}
}

// mountSmallTmpfs mounts a tmpfs of size as a fresh folder, for tests of a
// full disk; it skips without root.
func mountSmallTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs as the capture root")
	}
	root := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", root).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", root).Run() })
	return root
}

// fillDisk writes path until its filesystem is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			return
		}
	}
}
