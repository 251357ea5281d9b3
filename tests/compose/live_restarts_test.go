package compose

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// squatter listens on the lab's SSH port from inside the workload, in a
// retry loop, and logs every connection it accepts: the attack of issue 17.
const squatter = `use Socket; $| = 1;
my $log = "/tmp/squatter.log";
while (1) {
  socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
  setsockopt($s, SOL_SOCKET, SO_REUSEADDR, 1);
  if (bind($s, sockaddr_in(2222, INADDR_ANY)) && listen($s, 16)) {
    while (my $peer = accept(my $c, $s)) {
      my ($port, $addr) = sockaddr_in($peer);
      open(my $l, ">>", $log); print $l "ACCEPTED " . inet_ntoa($addr) . ":$port\n"; close $l;
      print $c "SSH-2.0-OpenSSH_9.2 squatter\r\n"; close $c;
    }
  }
  close $s; select(undef, undef, undef, 0.05);
}
`

// restartFault is one fault of issue 17 and what the session open at it
// must show.
type restartFault struct {
	name string
	act  func(s *liveStack)
}

// faultGaps: faults the pair does not heal from yet (compose/README.md),
// with why; they are reported, not run.
var faultGaps = map[string]string{
	"docker-compose restart": "docker-compose 1.29 restarts both containers in parallel; " +
		"the workload's start while the sidecar is stopped fails (cannot join network of a non running container) and is never retried",
}

func restartFaults() []restartFault {
	docker := func(args ...string) func(s *liveStack) {
		return func(s *liveStack) { mustRun(s.t, 90*time.Second, nil, "docker", args...) }
	}
	return []restartFault{
		{"sidecar SIGKILL + start", func(s *liveStack) {
			docker("kill", "-s", "KILL", sidecarName)(s)
			docker("start", sidecarName)(s)
		}},
		// The known gap of the first compose slice: the workload used to exit
		// while the sidecar was still down, and the engine's failed restart
		// was never retried. 15 s is the fault's length, not a wait.
		{"sidecar SIGKILL, down 15 s, start", func(s *liveStack) {
			docker("kill", "-s", "KILL", sidecarName)(s)
			<-time.After(15 * time.Second)
			docker("start", sidecarName)(s)
		}},
		{"docker restart sidecar", docker("restart", sidecarName)},
		{"docker restart workload", func(s *liveStack) { docker("restart", s.workload)(s) }},
		{"docker-compose restart", func(s *liveStack) { s.compose(2*time.Minute, "restart") }},
		{"stop then up", func(s *liveStack) {
			s.compose(2*time.Minute, "stop")
			s.compose(2*time.Minute, "up", "-d")
		}},
		{"agent kill", func(s *liveStack) {
			mustRun(s.t, 10*time.Second, nil, "docker", "exec", s.workload, "pkill", "-KILL", "-x", "aptl-launch-age")
		}},
	}
}

// TestLiveRestarts plants the squatter as the unprivileged user from a
// recorded session, then runs each fault: the squatter never receives a
// connection from the published port (stock ssh and node ssh2, pinned and
// not), a new session is recorded and verifies within 30 s with no manual
// step, and the session open at the fault has a close reason or the
// recovery statement. APTL_CAPTURE_RESTART_ROUNDS=5 repeats every fault
// and logs the median recovery time (compose/README.md).
func TestLiveRestarts(t *testing.T) {
	requireDocker(t)
	rounds := 1
	if n, err := strconv.Atoi(os.Getenv("APTL_CAPTURE_RESTART_ROUNDS")); err == nil && n > 0 && n <= 20 {
		rounds = n
	}
	s := startStack(t)
	times := map[string][]time.Duration{}
	for round := 0; round < rounds; round++ {
		for i, f := range restartFaults() {
			if gap := faultGaps[f.name]; gap != "" {
				t.Logf("NOT RUN %s (known gap): %s", f.name, gap)
				continue
			}
			tag := fmt.Sprintf("r%d-f%d", round, i)
			times[f.name] = append(times[f.name], runRestartFault(t, s, f, tag))
		}
	}
	for _, f := range restartFaults() {
		d := times[f.name]
		if len(d) == 0 {
			continue
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		t.Logf("recovery after %-36s median %v of %d: %v", f.name+":", d[len(d)/2].Round(100*time.Millisecond), len(d), d)
	}
}

func runRestartFault(t *testing.T, s *liveStack, f restartFault, tag string) time.Duration {
	s.plantSquatter("plant-" + tag)
	openID := "open-" + tag
	done := s.background(openID, "sleep 300")
	s.waitInWorkload("sleep 300")

	f.act(s)
	start := time.Now()
	recovered := s.recoveredSession("after-"+tag, start)
	took := time.Since(start)
	t.Logf("%s: a new session recorded %v after the fault", f.name, took.Round(100*time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("%s: sessions recorded again only after %v (limit 30 s)", f.name, took)
	}
	s.unpinnedClientsReachSidecar(tag)
	s.noSquatterConnections(f.name)

	if out, err := s.verify(s.harvest(recovered)); err != nil {
		t.Errorf("%s: the first session after the fault does not verify: %v\n%s", f.name, err, out)
	}
	// The session open at the fault: ended by the sidecar with a reason, or
	// cut by its death and stated by the recovery record.
	// Where the fault left the shell running, end it (no process: fine).
	run(t, 20*time.Second, nil, "docker", "exec", s.workload, "pkill", "-KILL", "-f", "sleep 300")
	waitClosed(t, done, f.name)
	s.explicitEnd(f.name, openID)
	return took
}

// plantSquatter starts the squatter as user kali from a recorded session
// (setsid nohup: it outlives the session) and checks that the record holds
// the command.
func (s *liveStack) plantSquatter(session string) {
	s.t.Helper()
	encoded := base64.StdEncoding.EncodeToString([]byte(squatter))
	cmd := "echo " + encoded + " | base64 -d > /tmp/squatter.pl && setsid nohup perl /tmp/squatter.pl >/dev/null 2>&1 </dev/null & echo planted-as-$(id -un)"
	out, err := s.ssh(30*time.Second, session, false, cmd)
	if err != nil || !strings.Contains(out, "planted-as-kali") {
		s.t.Fatalf("planting the squatter: %v\n%s", err, out)
	}
	s.waitInWorkload("perl /tmp/squatter.pl")
	if ts := string(readHarvested(s.t, s.harvest(session), "pty/typescript")); !strings.Contains(ts, encoded[:40]) {
		s.t.Errorf("the planting session's record does not hold the squatter's command")
	}
}

// recoveredSession polls with the pinned stock ssh client until a new
// session runs, and returns its id. Between polls, an unpinned stock ssh
// probes the port too, so a squatter answering at any point is seen.
func (s *liveStack) recoveredSession(prefix string, since time.Time) string {
	s.t.Helper()
	var out string
	for i := 0; time.Since(since) < 60*time.Second; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		var err error
		out, err = s.ssh(15*time.Second, id, false, "echo recorded-again")
		if err == nil && strings.Contains(out, "recorded-again") {
			return id
		}
		s.sshUnpinned(fmt.Sprintf("%s-u%d", prefix, i))
		time.Sleep(300 * time.Millisecond) // poll interval, not synchronisation
	}
	s.t.Fatalf("no session recorded within 60 s of the fault: %s", out)
	return ""
}

// sshUnpinned is a client that accepts any host key.
func (s *liveStack) sshUnpinned(session string) (string, error) {
	return run(s.t, 15*time.Second, nil, "ssh", "-p", strconv.Itoa(s.port), "-i", filepath.Join(s.dir, "client"),
		"-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o", "SetEnv=APTL_SESSION_ID="+session+" APTL_RUN_ID="+liveRunID,
		"kali@127.0.0.1", "echo unpinned-ok")
}

// unpinnedClientsReachSidecar: after the fault, stock ssh and node ssh2
// without pinning, and ssh2 pinned, all get a recorded session.
func (s *liveStack) unpinnedClientsReachSidecar(tag string) {
	s.t.Helper()
	if out, err := s.sshUnpinned("unpinned-" + tag); err != nil || !strings.Contains(out, "unpinned-ok") {
		s.t.Errorf("unpinned stock ssh after the fault: %v\n%s", err, out)
	}
	for _, pin := range []string{"unpinned", strings.Fields(s.hostKey)[1]} {
		out, err := s.node("ssh2-"+pin[:8]+"-"+tag, pin, "echo from-ssh2")
		if errors.Is(err, errNoNode) {
			s.t.Logf("node ssh2 not run: %v", err)
			return
		}
		if err != nil || !strings.Contains(out, `"ok":true`) || !strings.Contains(out, "from-ssh2") {
			s.t.Errorf("node ssh2 (%s) after the fault: %v\n%s", pin[:8], err, out)
		}
	}
}

// noSquatterConnections: the squatter's log, read from the workload, holds
// no accepted connection.
func (s *liveStack) noSquatterConnections(fault string) {
	s.t.Helper()
	out, _ := run(s.t, 20*time.Second, nil, "docker", "exec", s.workload, "sh", "-c", "cat /tmp/squatter.log 2>/dev/null; echo LOG-READ")
	if !strings.Contains(out, "LOG-READ") {
		s.t.Fatalf("%s: could not read the squatter's log: %s", fault, out)
	}
	if strings.Contains(out, "ACCEPTED") {
		s.t.Errorf("%s: a connection reached the workload's squatter:\n%s", fault, out)
	}
}

// explicitEnd: the session open at the fault has a close reason, or is
// unfinalized with the recovery statement.
func (s *liveStack) explicitEnd(fault, id string) {
	s.t.Helper()
	var dir string
	deadline := time.Now().Add(30 * time.Second)
	for {
		dir = s.harvest(id)
		reason := timingHeader(s.t, dir, "APTL_CLOSE_REASON")
		if reason != "" {
			s.t.Logf("%s: the open session closed with %q", fault, reason)
			return
		}
		if _, err := os.Stat(filepath.Join(dir, "pty", "recovery.jsonl")); err == nil {
			s.t.Logf("%s: the open session is unfinalized with its recovery statement", fault)
			return
		}
		if time.Now().After(deadline) {
			s.t.Errorf("%s: the session open at the fault has neither a close reason nor a recovery statement", fault)
			return
		}
		os.RemoveAll(dir)
		time.Sleep(500 * time.Millisecond) // poll interval, not synchronisation
	}
}

func readHarvested(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return b
}
