package tests

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
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

// subcommandsOf parses `help`: one line per subcommand, "  <name>  <summary>".
func subcommandsOf(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command(bin, "help").Output()
	if err != nil {
		t.Fatalf("help: %v", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); strings.HasPrefix(line, "  ") && len(f) >= 2 && !strings.HasPrefix(f[0], "aptl-") {
			names = append(names, f[0])
		}
	}
	if len(names) == 0 {
		t.Fatalf("help lists no subcommand:\n%s", out)
	}
	return names
}

// TestSubcommandUsage: `help` lists every subcommand with a one-line
// summary; `<cmd> -h` prints its synopsis ("usage: aptl-kali-capture
// <cmd> ...") and its flags on stdout and exits 0; an unknown flag prints
// the one-line error, the synopsis and a pointer to -h on stderr, not the
// flag list, and exits 2.
func TestSubcommandUsage(t *testing.T) {
	bin := buildCommand(t)
	names := subcommandsOf(t, bin)
	for _, args := range [][]string{{"help", "no-such"}, {"help", "serve", "verify"}} {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "is not one subcommand") || !strings.Contains(stderr.String(), "usage: aptl-kali-capture") {
			t.Errorf("%v: %v, stderr %q; want exit 2, the refusal and the usage", args, err, stderr.String())
		}
	}
	for _, want := range []string{"serve", "health", "hostkey", "verify", "export", "ls", "play", "version"} {
		if !slices.Contains(names, want) {
			t.Errorf("help does not list %s: %v", want, names)
		}
	}
	// A value the command refuses is shown with the synopsis and the -h
	// pointer as an unknown flag is: the one who typed it learns the call.
	for _, args := range [][]string{
		{"play", "--speed", "abc", "x"},
		{"verify", "/no/such"},
		{"ls", "--verify"},
		{"serve", "--pty-eof", "sometimes"},
		{"export", "--format", "pdf", "x"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = t.TempDir()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || len(lines) != 3 ||
			!strings.HasPrefix(lines[0], "aptl-kali-capture "+args[0]+": --") ||
			!strings.HasPrefix(lines[1], "usage: aptl-kali-capture "+args[0]) ||
			lines[2] != "Run 'aptl-kali-capture "+args[0]+" -h' for every flag." {
			t.Errorf("%v: %v, stderr %q; want exit 2, the setting named, the synopsis and the -h pointer", args, err, stderr.String())
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(bin, name, "-h")
			cmd.Dir = t.TempDir()
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil || !strings.HasPrefix(stdout.String(), "usage: aptl-kali-capture "+name) || stderr.Len() != 0 {
				t.Errorf("%s -h: err %v, stdout %q, stderr %q; want the synopsis on stdout and exit 0", name, err, stdout.String(), stderr.String())
			}
			synopsis, _, _ := strings.Cut(stdout.String(), "\n")
			help := stdout.String()

			// `help NAME` prints what `NAME -h` does.
			cmd = exec.Command(bin, "help", name)
			cmd.Dir = t.TempDir()
			out, err := cmd.Output()
			if err != nil || string(out) != help {
				t.Errorf("help %s: err %v, stdout %q; want %s -h's %q", name, err, out, name, help)
			}

			cmd = exec.Command(bin, name, "--no-such-flag")
			cmd.Dir = t.TempDir()
			stdout.Reset()
			stderr.Reset()
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			var ee *exec.ExitError
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || len(lines) != 3 ||
				lines[0] != "aptl-kali-capture "+name+": flag provided but not defined: -no-such-flag" ||
				lines[1] != synopsis || !strings.Contains(lines[2], "aptl-kali-capture "+name+" -h") {
				t.Errorf("%s --no-such-flag: %v, stderr %q; want exit 2, the error, %q and a pointer to -h", name, err, stderr.String(), synopsis)
			}
		})
	}
}

// TestStampedVersion: a build stamped with -ldflags -X main.stampedVersion
// (compose/build.sh's, README's go install form) reports that version, made
// safe for the SSH banner, in version and --version, with or without VCS
// data (-buildvcs=false: a staging folder's build has none).
func TestStampedVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "aptl-kali-capture")
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags", "-X main.stampedVersion=v0.28-3-gabc", "-o", bin, "../cmd/aptl-kali-capture")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil || strings.TrimSpace(string(out)) != "aptl-kali-capture v0.28.3.gabc" {
			t.Errorf("%s: %v, %q; want the stamp with its minus signs made dots", arg, err, out)
		}
	}
	unstamped := filepath.Join(t.TempDir(), "aptl-kali-capture")
	if out, err := exec.Command("go", "build", "-buildvcs=false", "-o", unstamped, "../cmd/aptl-kali-capture").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if out, err := exec.Command(unstamped, "version").Output(); err != nil || strings.TrimSpace(string(out)) != "aptl-kali-capture devel" {
		t.Errorf("a build with neither stamp nor VCS data: %v, %q; want devel", err, out)
	}
}
