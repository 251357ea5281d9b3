package agentd

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
	"github.com/aptl/aptl-kali-capture/internal/peercred"
)

// TestCheckPeerIDsBounds: the sidecar's uid and gid may be any id the
// kernel can give a process, 0 to 2^32-2; -1 and 2^32-1 (the kernel's "no
// id") are refused, naming which.
func TestCheckPeerIDsBounds(t *testing.T) {
	for _, tt := range []struct {
		uid, gid int
		want     string // "" when taken
	}{
		{0, 0, ""},
		{peercred.MaxID, peercred.MaxID, ""},
		{peercred.MaxID + 1, 0, "peer uid 4294967295 is not from 0 to 4294967294"},
		{0, peercred.MaxID + 1, "peer gid 4294967295 is not from 0 to 4294967294"},
		{-1, 0, "peer uid -1"},
		{0, -1, "peer gid -1"},
	} {
		err := checkPeerIDs(tt.uid, tt.gid)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("checkPeerIDs(%d, %d) = %v, want %q", tt.uid, tt.gid, err, tt.want)
		}
	}
}

// TestCheckPeerCredentials: a peer is the sidecar only with its uid and
// its gid both, and from outside the agent's PID namespace (pid 0).
func TestCheckPeerCredentials(t *testing.T) {
	s := &Server{cfg: Config{PeerUID: 10001, PeerGID: 10002}}
	for _, tt := range []struct {
		name string
		cred unix.Ucred
		ok   bool
	}{
		{"the sidecar", unix.Ucred{Pid: 0, Uid: 10001, Gid: 10002}, true},
		{"another uid", unix.Ucred{Pid: 0, Uid: 0, Gid: 10002}, false},
		{"another gid", unix.Ucred{Pid: 0, Uid: 10001, Gid: 0}, false},
		{"a workload process with the sidecar's ids", unix.Ucred{Pid: 7, Uid: 10001, Gid: 10002}, false},
	} {
		if err := s.checkPeer(&tt.cred); (err == nil) != tt.ok {
			t.Errorf("%s: checkPeer = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// TestSpawnPipesNamesTheWrongFd: a pipes spawn whose fds are not read,
// write, write ends of pipes names the fd (1 to 3) that is wrong.
func TestSpawnPipesNamesTheWrongFd(t *testing.T) {
	pipe := func() (r, w *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		return r, w
	}
	in, _ := pipe()
	_, out := pipe()
	_, errw := pipe()
	msg := agentwire.SpawnMsg{User: "kali", Mode: agentwire.SpawnPipes}
	for i, files := range [][]*os.File{{out, out, errw}, {in, in, errw}, {in, out, in}} {
		_, err := specFromSpawn(msg, files)
		want := "(fd " + string(rune('1'+i)) + " of 3)"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("fd %d the wrong end: %v, want it named %q", i+1, err, want)
		}
	}
	if _, err := specFromSpawn(msg, []*os.File{in, out, errw}); err != nil {
		t.Errorf("three right ends: %v", err)
	}
}
