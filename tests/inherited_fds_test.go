package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// starterFD is the descriptor the test's starter leaves open across exec.
const starterFD = 7

// TestSessionsGetNoDescriptorOfTheStarter starts each program that starts
// sessions (serve with the local adapter; the launch agent) the way a
// careless supervisor might: from a shell script that leaves a root-only
// file open across exec as descriptor 7. The program itself holds it (the
// control: without login.KeepInheritedFDsFromSessions the session's shell
// got it and could read the file through it), says so in its log, and no
// session's shell, with a terminal or without, has it, nor any descriptor
// but its stdin, stdout and stderr.
func TestSessionsGetNoDescriptorOfTheStarter(t *testing.T) {
	bin, agentBin := buildForLiveTest(t), buildAgent(t)
	secret := filepath.Join(t.TempDir(), "starter-secret")
	if err := os.WriteFile(secret, []byte("only the starter reads this\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What /proc shows for the descriptor: the path with any link in the
	// temporary folder's path resolved.
	resolved, err := filepath.EvalSymlinks(secret)
	if err != nil {
		t.Fatal(err)
	}
	// starter returns a script that opens secret as descriptor 7 (sh's
	// `exec 7<` leaves it open across exec) and execs program: the
	// program keeps the script's pid.
	starter := func(t *testing.T, program string) string {
		if strings.Contains(secret, "'") {
			t.Skipf("%q cannot be single-quoted for sh", secret)
		}
		return execScript(t, filepath.Join(t.TempDir(), "starter"), fmt.Sprintf("exec %d<'%s'\n", starterFD, secret), program)
	}
	check := func(t *testing.T, program string, pid int, logs func() string, sshArgs []string) {
		t.Helper()
		if got, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, starterFD)); got != resolved {
			t.Fatalf("%s does not hold the starter's descriptor %d (%q): the test cannot show a leak", program, starterFD, got)
		}
		// Both kinds of session: pipes, and a terminal (-tt: pty-req, then
		// exec).
		for _, mode := range []string{"-T", "-tt"} {
			sessionFDs(t, append([]string{mode, "-o", "BatchMode=yes"}, sshArgs...), mode == "-tt", resolved, logs)
		}
		// Text (fds=[7 10]) or JSON ("fds":[7,10]) logs.
		logged := regexp.MustCompile(`kept from sessions.*fds"?[=:]"?\[([0-9 ,]*)\]`).FindStringSubmatch(logs())
		if logged == nil || !slices.Contains(strings.FieldsFunc(logged[1], func(r rune) bool { return r == ' ' || r == ',' }), strconv.Itoa(starterFD)) {
			t.Errorf("%s's log does not name descriptor %d as kept from sessions:\n%s", program, starterFD, logs())
		}
	}

	t.Run("local", func(t *testing.T) {
		work := t.TempDir()
		srv, sshArgs, logs := startServe(t, starter(t, bin), work)
		check(t, "aptl-kali-capture", srv.Process.Pid, logs.String, sshArgs)
	})
	t.Run("agent", func(t *testing.T) {
		socket := fmt.Sprintf("@aptl-test-fds-%d", time.Now().UnixNano())
		agent := startAgent(t, socket, append([]string{starter(t, agentBin), "-socket", socket, "-insecure-allow-same-pidns"}, testAgentUserFlags(t)...)...)
		work := t.TempDir()
		_, sshArgs, _ := startServe(t, bin, work, "--launch", "agent", "--agent-socket", socket,
			"--insecure-agent-same-pidns", "--agent-uid", strconv.Itoa(os.Geteuid()))
		check(t, "aptl-launch-agent", agent.cmd.Process.Pid, agent.logs.String, sshArgs)
	})
}

// sessionFDs runs a session with ssh's args (a terminal or not, as tty
// says) that lists its shell's descriptors, and requires exactly stdin, stdout and stderr, none of them
// the file at secret: neither what the program's starter left open nor
// one the program opened itself (its listener, record files, the
// trampoline's memory file, another session's terminal).
func sessionFDs(t *testing.T, args []string, tty bool, secret string, logs func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// ls, a child, lists the shell's descriptors: a glob in the shell
	// itself would list the descriptor it reads the folder with.
	out, err := exec.CommandContext(ctx, "ssh", append(args, `ls -l /proc/$$/fd; echo LISTED`)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "LISTED") {
		t.Fatalf("session (%s) failed: %v\n%s\nlogs:\n%s", args[0], err, out, logs())
	}
	if strings.Contains(string(out), secret) {
		t.Errorf("the session's (%s) shell has the starter's descriptor:\n%s", args[0], out)
	}
	var fds []string // "lr-x------ 1 root root 64 Dec  1 15:18 0 -> pipe:[1403299]"
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[len(f)-2] == "->" {
			fds = append(fds, f[len(f)-3])
		}
	}
	if !slices.Equal(fds, []string{"0", "1", "2"}) {
		t.Errorf("the session's (%s) shell holds descriptors %v, want only 0, 1 and 2:\n%s", args[0], fds, out)
	}
	if got := strings.Contains(string(out), " -> /dev/pts/"); got != tty {
		t.Errorf("the session's (%s) shell has a terminal: %v, want %v:\n%s", args[0], got, tty, out)
	}
}
