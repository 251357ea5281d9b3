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
		// Compose 1.29 restarts both at once; the workload's supervisor waits
		// at SIGTERM for the new sidecar (compose/kali/aptl-agent-supervise).
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
// and logs the median recovery times (compose/README.md);
// APTL_CAPTURE_RESTART_ONLY=<part of a fault's name> runs only the faults
// whose names hold it.
func TestLiveRestarts(t *testing.T) {
	requireDocker(t)
	rounds := 1
	if n, err := strconv.Atoi(os.Getenv("APTL_CAPTURE_RESTART_ROUNDS")); err == nil && n > 0 && n <= 20 {
		rounds = n
	}
	faults := selectedFaults(t, os.Getenv("APTL_CAPTURE_RESTART_ONLY"))
	s := startStack(t)
	times := map[string][]recovery{}
	for round := 0; round < rounds; round++ {
		for i, f := range faults {
			tag := fmt.Sprintf("r%d-f%d", round, i)
			times[f.name] = append(times[f.name], runRestartFault(t, s, f, tag))
		}
	}
	for _, f := range faults {
		logMedians(t, f.name, times[f.name])
	}
}

func selectedFaults(t *testing.T, only string) []restartFault {
	var faults []restartFault
	for _, f := range restartFaults() {
		if strings.Contains(f.name, only) {
			faults = append(faults, f)
		}
	}
	if len(faults) == 0 {
		t.Fatalf("APTL_CAPTURE_RESTART_ONLY=%q names no fault", only)
	}
	return faults
}

// recovery is one fault's timing: how long its commands ran, and when the
// first new session was recorded, counted from their end and their start.
type recovery struct{ fault, afterEnd, afterStart time.Duration }

func logMedians(t *testing.T, name string, rs []recovery) {
	median := func(pick func(recovery) time.Duration) time.Duration {
		d := make([]time.Duration, len(rs))
		for i, r := range rs {
			d[i] = pick(r)
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2].Round(100 * time.Millisecond)
	}
	t.Logf("recovery after %-36s median of %d: %v after the fault's end, %v after its start (its commands: %v)", name+":", len(rs),
		median(func(r recovery) time.Duration { return r.afterEnd }), median(func(r recovery) time.Duration { return r.afterStart }),
		median(func(r recovery) time.Duration { return r.fault }))
}

func runRestartFault(t *testing.T, s *liveStack, f restartFault, tag string) recovery {
	s.plantSquatter("plant-" + tag)
	openID := "open-" + tag
	done := s.background(openID, "sleep 300")
	s.waitInWorkload("sleep 300")

	begin := time.Now()
	f.act(s)
	end := time.Now()
	recovered := s.recoveredSession("after-"+tag, end)
	r := recovery{fault: end.Sub(begin), afterEnd: time.Since(end), afterStart: time.Since(begin)}
	t.Logf("%s: a new session recorded %v after the fault's end (its commands took %v)", f.name,
		r.afterEnd.Round(100*time.Millisecond), r.fault.Round(100*time.Millisecond))
	if r.afterEnd > 30*time.Second {
		t.Errorf("%s: sessions recorded again only after %v (limit 30 s)", f.name, r.afterEnd)
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
	return r
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
	side, _ := run(s.t, 10*time.Second, nil, "docker", "ps", "-a", "--filter", "name="+s.project, "--filter", "name="+sidecarName)
	logs, _ := run(s.t, 10*time.Second, nil, "docker", "logs", "--tail", "15", s.workload)
	s.t.Fatalf("no session recorded within 60 s of the fault: %s\ncontainers:\n%s\nworkload's last log lines:\n%s", out, side, logs)
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
