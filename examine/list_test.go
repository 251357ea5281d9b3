//go:build linux

package examine_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// recordIn records a finalized session under root/run/id with the real
// recorder; command "" is a shell session.
func recordIn(t *testing.T, root, run, id, command string) string {
	t.Helper()
	s, err := recorder.Create(root, recorder.Meta{RunID: run, SessionID: id, Command: command},
		recorder.Options{Signer: recordertest.Signer()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Output([]byte("out of " + id + "\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	return s.Dir()
}

// TestListFolderKinds: List takes a capture root, one run folder, a
// harvest and one session folder, and lists the sessions in each, never the
// folders that hold them (a run, pty/, kali-side/, mcp-side/) as broken
// sessions of their own; FolderKind names each kind. Each session carries
// the open record's exec command, nil for a shell.
func TestListFolderKinds(t *testing.T) {
	root := t.TempDir()
	shell := recordIn(t, root, "run-a", "shell-1", "")
	recordIn(t, root, "run-a", "exec-1", "id -u; printf '\x1b[2J'")
	recordIn(t, root, "run-b", "other-1", "true")
	harvest := recordertest.NewRunDir(t)
	recordertest.Record(t, harvest, recordertest.PTYSpec("harvested-1"))
	if err := os.MkdirAll(filepath.Join(harvest, "mcp-side", "sessions"), 0o700); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		dir, kind string
		run       string
		want      []string // RUN/SESSION, in order
	}{
		{root, examine.FolderCaptureRoot, "", []string{"run-a/exec-1", "run-a/shell-1", "run-b/other-1"}},
		{root, examine.FolderCaptureRoot, "run-b", []string{"run-b/other-1"}},
		{filepath.Join(root, "run-a"), examine.FolderRun, "", []string{"run-a/exec-1", "run-a/shell-1"}},
		{filepath.Join(root, "run-a"), examine.FolderRun, "run-b", nil},
		{harvest, examine.FolderHarvest, "", []string{recordertest.RunID + "/harvested-1"}},
		{shell, examine.FolderSession, "", []string{"run-a/shell-1"}},
		{filepath.Join(shell, vocab.PTYDir, ".."), examine.FolderSession, "", []string{"run-a/shell-1"}},
	} {
		if got := examine.FolderKind(tt.dir); got != tt.kind {
			t.Errorf("FolderKind(%s) = %q, want %q", tt.dir, got, tt.kind)
		}
		sums, err := examine.List(tt.dir, examine.ListOptions{Run: tt.run})
		if err != nil {
			t.Errorf("List(%s): %v", tt.dir, err)
			continue
		}
		var got []string
		for _, s := range sums {
			got = append(got, s.Run+"/"+s.Session)
			if s.State != examine.StateFinalized {
				t.Errorf("List(%s): %s/%s is %s (%s), want finalized: only sessions are listed", tt.dir, s.Run, s.Session, s.State, s.Error)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("List(%s, run %q) = %v, want %v", tt.dir, tt.run, got, tt.want)
		}
	}

	sums, err := examine.List(filepath.Join(root, "run-a"), examine.ListOptions{})
	if err != nil || len(sums) != 2 {
		t.Fatalf("List(run-a) = %v, %v", sums, err)
	}
	if c := sums[0].Command; c == nil || *c != "id -u; printf '\x1b[2J'" {
		t.Errorf("exec-1's command = %v, want the open record's", c)
	}
	if c := sums[1].Command; c != nil {
		t.Errorf("shell-1's command = %q, want nil for a shell", *c)
	}
}
