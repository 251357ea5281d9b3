package tests

import (
	"bufio"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestHelpAndVersion: -h, --help and help print usage on stdout and exit
// 0; version and --version print the build's version, which the SSH
// banner carries in the characters RFC 4253 allows.
func TestHelpAndVersion(t *testing.T) {
	bin := buildForLiveTest(t)
	for _, arg := range []string{"-h", "--help", "help"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil || !strings.HasPrefix(string(out), "usage: aptl-kali-capture") {
			t.Errorf("%s: err %v, stdout %q; want usage on stdout and exit 0", arg, err, out)
		}
	}
	var version string
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).Output()
		v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "aptl-kali-capture ")
		if err != nil || !ok || v == "" {
			t.Fatalf("%s: err %v, stdout %q", arg, err, out)
		}
		version = v
	}
	if strings.ContainsAny(version, "- \t") {
		t.Errorf("version %q holds characters the SSH banner may not", version)
	}
	_, sshArgs, _ := startServe(t, bin, t.TempDir())
	var port string
	for i, a := range sshArgs {
		if a == "-p" && i+1 < len(sshArgs) {
			port = sshArgs[i+1]
		}
	}
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	banner, err := bufio.NewReader(conn).ReadString('\n')
	if want := "SSH-2.0-aptl-kali-capture_" + version + "\r\n"; err != nil || banner != want {
		t.Errorf("banner %q (%v), want %q", banner, err, want)
	}
}
