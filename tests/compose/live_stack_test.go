package compose

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// liveStack is one Compose project of the lab pair, built from this
// checkout and local material, torn down with its volumes by t.Cleanup.
type liveStack struct {
	t        *testing.T
	project  string
	dir      string // temp dir: client key, known_hosts, harvests
	port     int
	env      []string
	workload string // the workload's container name
	relay    string // the witness relay's container name
	hostKey  string // known_hosts line's key part: "ssh-ed25519 AAAA..."
	bin      string // host build of aptl-kali-capture, for verify
}

const liveRunID = "livetest"

// requireDocker skips unless the live suite is switched on and an engine answers.
func requireDocker(t *testing.T) {
	t.Helper()
	if os.Getenv("APTL_CAPTURE_DOCKER_TESTS") != "1" {
		t.Skip("live Compose suite off: set APTL_CAPTURE_DOCKER_TESTS=1 (needs a Docker engine, docker-compose, debootstrap, root)")
	}
	for _, tool := range []string{"docker", "docker-compose", "ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("live Compose suite: %s not installed", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info").CombinedOutput(); err != nil {
		t.Skipf("live Compose suite: no Docker engine answers (docker info: %v: %.200s)", err, out)
	}
}

// run runs a command with a deadline and returns its combined output.
func run(t *testing.T, timeout time.Duration, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func mustRun(t *testing.T, timeout time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	out, err := run(t, timeout, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startStack builds everything and brings a uniquely named project up.
func startStack(t *testing.T) *liveStack {
	t.Helper()
	if _, err := run(t, 10*time.Second, nil, "docker", "inspect", "-f", "{{.Name}}", sidecarName); err == nil {
		t.Fatalf("a container named %s exists already (another stack is up: compose/down.sh)", sidecarName)
	}
	// The pair's audit witness loads its rules into the kernel, as the
	// other audit suites do.
	testutil.LockKernelAudit(t)
	s := &liveStack{t: t, dir: t.TempDir(), port: freePort(t)}
	s.project = fmt.Sprintf("aptllive%d", os.Getpid())
	s.workload = s.project + "_kali_1"
	s.relay = s.project + "_kali-witness_1"
	repo := repoFile(t, ".")
	mustRun(t, 6*time.Minute, nil, filepath.Join(repo, "compose/build.sh"))
	s.bin = filepath.Join(s.dir, "aptl-kali-capture")
	mustRun(t, 3*time.Minute, []string{"CGO_ENABLED=0"}, "go", "build", "-o", s.bin, filepath.Join(repo, "cmd/aptl-kali-capture"))
	mustRun(t, 10*time.Second, nil, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(s.dir, "client"))
	s.env = []string{
		"APTL_AUTHORIZED_KEYS=" + filepath.Join(s.dir, "client.pub"),
		"APTL_SSH_PORT=" + strconv.Itoa(s.port),
		// docker-compose 1.29 reads the profile relative to its working
		// directory, which is the test's, not compose/.
		"APTL_WORKLOAD_SECCOMP=" + repoFile(t, "compose/kali/seccomp.json"),
	}
	t.Cleanup(s.down)
	s.compose(2*time.Minute, "up", "-d")
	s.waitHealthy(60 * time.Second)
	// hostkey prints the known_hosts line alone on stdout, the SHA256
	// fingerprint on stderr (so `hostkey >> known_hosts` is right).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hk := exec.CommandContext(ctx, "docker", "exec", sidecarName, "aptl-kali-capture", "hostkey", "-host", fmt.Sprintf("[127.0.0.1]:%d", s.port))
	stdout, err := hk.Output()
	if err != nil {
		t.Fatalf("hostkey: %v", err)
	}
	line := strings.TrimSpace(string(stdout))
	fields := strings.Fields(line)
	if len(fields) != 3 {
		t.Fatalf("hostkey printed %q, want a known_hosts line", line)
	}
	s.hostKey = fields[1] + " " + fields[2]
	s.writeFile("known_hosts", line+"\n")
	s.writeFile("host.pub", s.hostKey+"\n")
	return s
}

func (s *liveStack) writeFile(name, text string) {
	if err := os.WriteFile(filepath.Join(s.dir, name), []byte(text), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

func (s *liveStack) compose(timeout time.Duration, args ...string) string {
	s.t.Helper()
	full := append([]string{"-f", repoFile(s.t, composeFile), "-p", s.project}, args...)
	return mustRun(s.t, timeout, s.env, "docker-compose", full...)
}

// down removes the project's containers, network and volumes, on failure too.
func (s *liveStack) down() {
	full := []string{"-f", repoFile(s.t, composeFile), "-p", s.project, "down", "--volumes", "--remove-orphans", "--timeout", "5"}
	if out, err := run(s.t, 2*time.Minute, s.env, "docker-compose", full...); err != nil {
		s.t.Errorf("tear down %s: %v\n%s", s.project, err, out)
	}
}

// waitHealthy polls the sidecar's health status until healthy or the deadline.
func (s *liveStack) waitHealthy(within time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < within {
		// health exits 0 and prints "healthy pcap=<state>" (it never fails
		// on pcap; liveWitnessCaps requires pcap=ok of this deployment).
		var err error
		last, err = run(s.t, 10*time.Second, nil, "docker", "exec", sidecarName, "aptl-kali-capture", "health")
		if f := strings.Fields(last); err == nil && len(f) > 0 && f[0] == "healthy" {
			return time.Since(start)
		}
		time.Sleep(500 * time.Millisecond) // poll interval, not synchronisation
	}
	logs, _ := run(s.t, 10*time.Second, nil, "docker", "logs", "--tail", "20", sidecarName)
	s.t.Fatalf("sidecar not healthy within %v: %s\n%s", within, last, logs)
	return 0
}

// ssh runs one session with stock OpenSSH, the host key pinned.
func (s *liveStack) ssh(timeout time.Duration, sessionID string, tty bool, command string) (string, error) {
	args := []string{"-p", strconv.Itoa(s.port), "-i", filepath.Join(s.dir, "client"), "-o", "IdentitiesOnly=yes",
		"-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + filepath.Join(s.dir, "known_hosts"),
		"-o", "BatchMode=yes", "-o", "SetEnv=APTL_SESSION_ID=" + sessionID + " APTL_RUN_ID=" + liveRunID}
	if tty {
		args = append(args, "-tt")
	}
	args = append(args, "kali@127.0.0.1", command)
	return run(s.t, timeout, nil, "ssh", args...)
}

// sessionWorks polls until a new session runs `echo`, within the deadline.
func (s *liveStack) sessionWorks(prefix string, within time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	var out string
	for i := 0; time.Since(start) < within; i++ {
		var err error
		out, err = s.ssh(15*time.Second, fmt.Sprintf("%s-%d", prefix, i), false, "echo recorded-again")
		if err == nil && strings.Contains(out, "recorded-again") {
			return time.Since(start)
		}
		time.Sleep(500 * time.Millisecond) // poll interval, not synchronisation
	}
	s.t.Fatalf("no session worked within %v after the fault: %s", within, out)
	return 0
}

// harvest copies a session folder out exactly as the lab does.
func (s *liveStack) harvest(session string) string {
	s.t.Helper()
	dest := filepath.Join(s.dir, "harvest", liveRunID, session) // verify checks the run/session layout
	if err := os.MkdirAll(dest, 0o700); err != nil {
		s.t.Fatal(err)
	}
	src := fmt.Sprintf("%s:/var/log/aptl/captures/%s/%s/.", sidecarName, liveRunID, session)
	mustRun(s.t, time.Minute, nil, "docker", "cp", src, dest)
	return dest
}

// verify runs the host's verify on harvested folders.
func (s *liveStack) verify(dirs ...string) (string, error) {
	args := append([]string{"verify", "--key", filepath.Join(s.dir, "host.pub")}, dirs...)
	return run(s.t, time.Minute, nil, s.bin, args...)
}

// timingHeader reads one H line's value from a harvested timing file.
func timingHeader(t *testing.T, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "pty", "timing"))
	if err != nil {
		t.Fatalf("read timing of %s: %v", dir, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == "H" && f[2] == name {
			return strings.Join(f[3:], " ")
		}
	}
	return ""
}
