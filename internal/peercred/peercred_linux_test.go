package peercred

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOfIsTheConnectingProcess(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "a")
	defer unix.Close(fds[1])
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cred, err := Of(c.(*net.UnixConn))
	if err != nil || int(cred.Pid) != os.Getpid() || int(cred.Uid) != os.Getuid() || int(cred.Gid) != os.Getgid() {
		t.Fatalf("Of: %+v %v, want this process's pid %d uid %d gid %d", cred, err, os.Getpid(), os.Getuid(), os.Getgid())
	}
}

func TestCheckIDs(t *testing.T) {
	for _, ids := range [][2]int{{-1, 0}, {0, -1}, {MaxID + 1, 0}, {0, MaxID + 1}} {
		if err := CheckIDs(ids[0], ids[1]); err == nil {
			t.Errorf("CheckIDs%v passed", ids)
		}
	}
	if err := CheckIDs(MaxID, MaxID); err != nil {
		t.Errorf("CheckIDs(MaxID): %v", err)
	}
	if err := CheckIDs(0, 0); err != nil {
		t.Errorf("CheckIDs(0, 0): %v", err)
	}
}
