package agentd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// connectAs connects to the unixpacket socket path as uid:gid in a child
// process and returns what it reports: "connected" or the error.
func connectAs(t *testing.T, path string, uid, gid uint32) string {
	t.Helper()
	// The system interpreter: a user's (pyenv under /root) is not
	// reachable by another uid.
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("/usr/bin/python3 not installed: it connects as another uid")
	}
	cmd := exec.Command(py, "-c", `import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
try:
    s.connect(sys.argv[1]); print("connected")
except OSError as e:
    print(e.strerror)`, path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("connect as %d:%d: %v: %s", uid, gid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestListenPathBelongsToPeer: a path socket is created owned by the
// configured sidecar uid and gid, mode 0600, so a sidecar that is not root
// can connect and every other non-root uid is refused by the filesystem.
func TestListenPathBelongsToPeer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent gives the socket file to another uid")
	}
	const peer, other = 10001, 10002
	dir, err := os.MkdirTemp("", "aptl-agent-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the peer must reach the file
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "agent.sock")
	ln, err := Listen(socket, peer, peer)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, err := os.Lstat(socket)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 || st.Uid != peer || st.Gid != peer {
		t.Errorf("socket file: mode %v uid %d gid %d; want a socket 0600 owned by %d:%d", fi.Mode(), st.Uid, st.Gid, peer, peer)
	}
	if got := connectAs(t, socket, peer, peer); got != "connected" {
		t.Errorf("the sidecar's uid %d could not connect: %s", peer, got)
	}
	if got := connectAs(t, socket, other, other); got != "Permission denied" {
		t.Errorf("uid %d: %s; want the filesystem to refuse it", other, got)
	}
	if got := connectAs(t, socket, other, peer); got != "Permission denied" {
		t.Errorf("uid %d with the sidecar's gid: %s; want refused (0600, not 0660)", other, got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the staging directory was left behind: %v", ents)
	}
}
