package compose

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The process witness in the pair: the sidecar's audit engine through the
// witness relay (kali-witness).

// relayCapMask is the relay's whole capability set.
const relayCapMask = 1<<capAuditControl | 1<<capAuditRead

var sesRecord = regexp.MustCompile(`"type":"audit-session"[^\n]*"audit_ses":"(\d+)"`)

// sessionSes is the audit session a harvested session's record names.
func sessionSes(t *testing.T, dir string) string {
	t.Helper()
	log := readHarvested(t, filepath.Join(dir, "pty"), "integrity.jsonl")
	m := sesRecord.FindSubmatch(log)
	if m == nil {
		t.Fatalf("%s: no audit-session record in its integrity log", dir)
	}
	return string(m[1])
}

// harvestRoot copies one of the capture root's lab-wide folders (_audit,
// _proc-acct) out as the lab does.
func (s *liveStack) harvestRoot(folder string) string {
	s.t.Helper()
	dest := filepath.Join(s.dir, "harvest-root", folder)
	if err := os.MkdirAll(dest, 0o700); err != nil {
		s.t.Fatal(err)
	}
	mustRun(s.t, time.Minute, nil, "docker", "cp", sidecarName+":"+capturesPath+"/"+folder+"/.", dest)
	return dest
}

// ausearch runs ausearch -if on file for key and returns its interpreted output.
func ausearch(t *testing.T, file, key string) string {
	t.Helper()
	out, err := run(t, time.Minute, nil, "ausearch", "-i", "-if", file, "-k", key)
	if err != nil {
		t.Fatalf("ausearch -if %s -k %s: %v\n%s", file, key, err, out)
	}
	return out
}

// liveAuditSession: a session as kali becomes root (sudo su -) and runs
// /usr/bin/id and a bash /dev/tcp connect; after the lab's harvest,
// ausearch finds the exec of /usr/bin/id with the session's ses in the
// session's own audit file, the connect too, _audit/audit.log and
// _proc-acct/ hold the session's processes, and the session verifies.
func liveAuditSession(t *testing.T, s *liveStack) {
	if _, err := exec.LookPath("ausearch"); err != nil {
		t.Skip("ausearch (Debian auditd) is not installed: the audit files cannot be read by the real tool")
	}
	const id = "s-audit"
	out, err := s.ssh(60*time.Second, id, false, "sudo su - -c '/usr/bin/id; exec 3<>/dev/tcp/127.0.0.1/9 || echo connect-refused'")
	if err != nil || !strings.Contains(out, "uid=0(root)") || !strings.Contains(out, "connect-refused") {
		t.Fatalf("audit session: %v\n%s", err, out)
	}
	dir := s.harvest(id)
	ses := sessionSes(t, dir)
	file := filepath.Join(dir, "audit", "audit-000001.log")
	execs := ausearch(t, file, "aptl_exec")
	if !regexp.MustCompile(`(?m)^type=SYSCALL .* ses=` + ses + ` .*exe=/usr/bin/id `).MatchString(execs) {
		t.Errorf("ausearch finds no exec of /usr/bin/id with ses=%s in the session's audit file:\n%.3000s", ses, execs)
	}
	if net := ausearch(t, file, "aptl_net"); !regexp.MustCompile(`saddr_fam=inet laddr=127\.0\.0\.1 lport=9 `).MatchString(net) {
		t.Errorf("ausearch finds no connect to 127.0.0.1:9 in the session's audit file:\n%.3000s", net)
	}
	global := ausearch(t, filepath.Join(s.harvestRoot("_audit"), "audit.log"), "aptl_exec")
	if !strings.Contains(global, "ses="+ses+" ") || !strings.Contains(global, "exe=/usr/bin/id") {
		t.Errorf("_audit/audit.log lacks the session's exec of /usr/bin/id (ses=%s)", ses)
	}
	acct := string(readHarvested(t, s.harvestRoot("_proc-acct"), "proc-acct.log"))
	if !regexp.MustCompile(`(?m) ses=` + ses + ` status=0 comm="id" exe="/usr/bin/id"$`).MatchString(acct) {
		t.Errorf("_proc-acct/proc-acct.log lacks the session's id process (ses=%s):\n%.2000s", ses, acct)
	}
	if out, err := s.verify(dir); err != nil || !strings.Contains(out, "audit: on, 1 files") {
		t.Errorf("verify %s: %v\n%s", id, err, out)
	}
}

// relayPID is the relay's process on the host (its init's child: init: true).
func (s *liveStack) relayPID(t *testing.T) string {
	t.Helper()
	pid := strings.TrimSpace(mustRun(t, 10*time.Second, nil, "docker", "inspect", "-f", "{{.State.Pid}}", s.relay))
	for _, p := range append([]string{pid}, childPIDs(t, pid)...) {
		if status, err := os.ReadFile("/proc/" + p + "/status"); err == nil && statusLine(string(status), "Name") == "aptl-kali-captu" {
			return p
		}
	}
	t.Fatalf("the relay container (init %s) runs no aptl-kali-capture", pid)
	return ""
}

// liveRelayPrivileges: the relay's processes hold AUDIT_CONTROL and
// AUDIT_READ and nothing else, as uid 0 with group 10002, with
// no-new-privileges and a seccomp filter, in the host's PID and network
// namespaces (the test's own: it runs on the host).
func liveRelayPrivileges(t *testing.T, s *liveStack) {
	init := strings.TrimSpace(mustRun(t, 10*time.Second, nil, "docker", "inspect", "-f", "{{.State.Pid}}", s.relay))
	for _, p := range append([]string{init}, childPIDs(t, init)...) {
		b, err := os.ReadFile("/proc/" + p + "/status")
		if err != nil {
			t.Errorf("relay process %s: %v", p, err)
			continue
		}
		status := string(b)
		var read []string
		for _, f := range []string{"Name", "Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"} {
			read = append(read, f+"="+strings.ReplaceAll(statusLine(status, f), "\t", ","))
		}
		t.Logf("relay process %s: %s", p, strings.Join(read, " "))
		for f, want := range map[string]uint64{"CapPrm": relayCapMask, "CapEff": relayCapMask, "CapBnd": relayCapMask, "CapInh": 0, "CapAmb": 0} {
			if got := capField(t, status, f); got != want {
				t.Errorf("relay process %s: %s %#x, want %#x", p, f, got, want)
			}
		}
		if !strings.HasPrefix(statusLine(status, "Uid"), "0\t") || !strings.HasPrefix(statusLine(status, "Gid"), "10002\t") ||
			statusLine(status, "NoNewPrivs") != "1" || statusLine(status, "Seccomp") != "2" {
			t.Errorf("relay process %s: want uid 0, gid 10002, NoNewPrivs 1, Seccomp 2", p)
		}
		for _, ns := range []string{"pid", "net"} {
			own, _ := os.Readlink("/proc/self/ns/" + ns)
			theirs, err := os.Readlink("/proc/" + p + "/ns/" + ns)
			if err != nil || theirs != own {
				t.Errorf("relay process %s: %s namespace %s, want the host's %s (%v)", p, ns, theirs, own, err)
			}
		}
	}
}

// liveWorkloadRootCannotBlindAudit: root in the workload cannot see or
// signal the relay, and its attempts to turn auditing off, delete the
// rules or change its loginuid all fail; health still says auditd=ok and
// the relay is the same process.
func liveWorkloadRootCannotBlindAudit(t *testing.T, s *liveStack) {
	probe := filepath.Join(s.dir, "auditprobe")
	mustRun(t, 3*time.Minute, []string{"CGO_ENABLED=0"}, "go", "build", "-o", probe, repoFile(t, "tests/clients/auditprobe"))
	const inWorkload = "/tmp/aptl-auditprobe"
	mustRun(t, 20*time.Second, nil, "docker", "cp", probe, s.workload+":"+inWorkload)
	before := s.relayPID(t)
	out, err := s.ssh(60*time.Second, "s-audit-tamper", false, fmt.Sprintf(
		"sudo -n %s -tamper; sudo -n pgrep -af witness-relay || echo no-relay-visible; sudo -n kill -0 %s 2>/dev/null || echo kill-refused; echo PROBE-DONE", inWorkload, before))
	if err != nil || !strings.Contains(out, "PROBE-DONE") {
		t.Fatalf("tamper session: %v\n%s", err, out)
	}
	for _, attempt := range []string{"disable", "list", "delete", "loginuid"} {
		m := regexp.MustCompile(`(?m)^` + attempt + `=(.*)$`).FindStringSubmatch(out)
		if m == nil || m[1] == "ok" {
			t.Errorf("root in the workload: %s attempt %v, want a refusal:\n%s", attempt, m, out)
		}
	}
	for _, want := range []string{"no-relay-visible", "kill-refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("root in the workload reached the relay (want %s):\n%s", want, out)
		}
	}
	if after := s.relayPID(t); after != before {
		t.Errorf("the relay changed from pid %s to %s during the tamper session", before, after)
	}
	if h := s.health(t); !strings.Contains(h, " auditd=ok procacct=ok ") {
		t.Errorf("health after the tamper session: %q", h)
	}
}

func (s *liveStack) health(t *testing.T) string {
	t.Helper()
	return mustRun(t, 20*time.Second, nil, "docker", "exec", sidecarName, "aptl-kali-capture", "health")
}

// waitHealthSays polls health until it holds want.
func (s *liveStack) waitHealthSays(t *testing.T, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var h string
	for time.Since(start) < within {
		h, _ = run(t, 20*time.Second, nil, "docker", "exec", sidecarName, "aptl-kali-capture", "health")
		if strings.Contains(h, want) {
			return time.Since(start)
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
	}
	t.Fatalf("health never said %q within %v: %q", want, within, h)
	return 0
}

// liveExecFlood: a session runs execs as fast as loops bash loops fork
// them, each times; every one of them is in its audit file, or the record
// holds an audit gap (lost, overrun): never thinned silently. Its rate is
// the figure the closing note gives.
func liveExecFlood(t *testing.T, s *liveStack, loops, each int) {
	const id = "s-audit-flood"
	n := loops * each
	out, err := s.ssh(5*time.Minute, id, false, fmt.Sprintf("s=$(date +%%s%%N); for j in $(seq %d); do (for i in $(seq %d); do /bin/true flood-$j-$i; done) & done; wait; e=$(date +%%s%%N); echo ELAPSED-NS=$((e-s))", loops, each))
	m := regexp.MustCompile(`ELAPSED-NS=(\d+)`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("flood session: %v\n%s", err, out)
	}
	ns, _ := strconv.ParseInt(m[1], 10, 64)
	dir := s.harvest(id)
	files, _ := filepath.Glob(filepath.Join(dir, "audit", "audit-*.log"))
	recorded := 0
	for _, f := range files {
		recorded += len(regexp.MustCompile(`a1="flood-\d+-\d+"`).FindAll(readHarvested(t, filepath.Dir(f), filepath.Base(f)), -1))
	}
	log := string(readHarvested(t, filepath.Join(dir, "pty"), "integrity.jsonl"))
	gaps := regexp.MustCompile(`"type":"gap"[^\n]*"reason":"audit-(lost|overrun)"`).FindAllString(log, -1)
	rate := float64(n) / (float64(ns) / 1e9)
	t.Logf("exec flood: %d execs in %.2f s (%.0f execs/s), %d recorded, %d audit-lost/overrun gap records", n, float64(ns)/1e9, rate, recorded, len(gaps))
	if recorded != n && len(gaps) == 0 {
		t.Errorf("exec flood: %d of %d execs recorded and no gap record: thinned silently", recorded, n)
	}
	if out, err := s.verify(dir); err != nil {
		t.Errorf("verify %s: %v\n%s", id, err, out)
	}
}

// liveRelayKilled: the relay SIGKILLed in the middle of a session: health
// says auditd=degraded until the engine restarts it, the sidecar and the
// workload are not restarted, and the session's record holds an
// audit-relay-down window from the kill to the relay's return, while its
// exec after the return is in its audit file.
func liveRelayKilled(t *testing.T, s *liveStack) {
	const id = "s-relay-killed"
	sidecarStarted := mustRun(t, 10*time.Second, nil, "docker", "inspect", "-f", "{{.State.StartedAt}}", sidecarName)
	done := s.background(id, "/bin/echo marker-before-kill; while [ ! -e /tmp/aptl-relay-back ]; do sleep 0.2; done; /bin/echo marker-after-return; sleep 1")
	s.waitInWorkload("aptl-relay-back")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(string(readHarvested(t, s.harvestRoot("_audit"), "audit.log")), `"marker-before-kill"`) {
		if time.Now().After(deadline) {
			t.Fatal("the session's exec before the kill never reached _audit/audit.log")
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not synchronisation
	}
	killed := time.Now()
	mustRun(t, 20*time.Second, nil, "docker", "kill", "-s", "KILL", s.relay)
	t.Logf("relay killed: health degraded after %v", s.waitHealthSays(t, " auditd=degraded procacct=degraded ", 15*time.Second).Round(100*time.Millisecond))
	started := time.Now()
	mustRun(t, 30*time.Second, nil, "docker", "start", s.relay)
	t.Logf("relay started: health ok after %v", s.waitHealthSays(t, " auditd=ok procacct=ok ", 15*time.Second).Round(100*time.Millisecond))
	mustRun(t, 10*time.Second, nil, "docker", "exec", s.workload, "touch", "/tmp/aptl-relay-back")
	waitClosed(t, done, "relay killed")
	if now := mustRun(t, 10*time.Second, nil, "docker", "inspect", "-f", "{{.State.StartedAt}}", sidecarName); now != sidecarStarted {
		t.Errorf("the sidecar was restarted (started %s, now %s)", sidecarStarted, now)
	}
	dir := s.harvest(id)
	log := string(readHarvested(t, filepath.Join(dir, "pty"), "integrity.jsonl"))
	var window []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"reason":"audit-relay-down"`) && !strings.Contains(line, `"error"`) {
			window = regexp.MustCompile(`"(first|last)":"([^"]+)"`).FindAllString(line, -1)
		}
	}
	if len(window) != 2 {
		t.Fatalf("the session's record has no closed audit-relay-down window:\n%s", log)
	}
	first, _ := time.Parse(time.RFC3339Nano, strings.Trim(strings.SplitN(window[0], ":", 2)[1], `"`))
	last, _ := time.Parse(time.RFC3339Nano, strings.Trim(strings.SplitN(window[1], ":", 2)[1], `"`))
	// From the last read that found the relay alive (just before the
	// kill) to the reconnection (after its start).
	if first.Before(killed.Add(-2*time.Second)) || first.After(killed.Add(time.Second)) || last.Before(started) {
		t.Errorf("relay window %v to %v; killed at %v, started at %v", first, last, killed, started)
	}
	audit := readHarvested(t, filepath.Join(dir, "audit"), "audit-000001.log")
	for _, marker := range []string{"marker-before-kill", "marker-after-return"} {
		if !strings.Contains(string(audit), `"`+marker+`"`) {
			t.Errorf("the session's audit file lacks %s", marker)
		}
	}
	if out, err := s.verify(dir); err != nil || !strings.Contains(out, "the witness relay unreachable: audit-relay-down") {
		t.Errorf("verify %s: %v, want the relay's window stated\n%s", id, err, out)
	}
}

// liveURingRefused: connect plus openat through io_uring (the test's
// uringprobe, copied into the workload) is refused to kali and to root by
// the workload's seccomp profile before any ring exists, as is a new user
// namespace (what Docker's default refuses is kept); the session verifies.
func liveURingRefused(t *testing.T, s *liveStack) {
	probe := filepath.Join(s.dir, "uringprobe")
	mustRun(t, 3*time.Minute, []string{"CGO_ENABLED=0"}, "go", "build", "-o", probe, repoFile(t, "tests/clients/uringprobe"))
	const inWorkload = "/tmp/aptl-uringprobe"
	mustRun(t, 20*time.Second, nil, "docker", "cp", probe, s.workload+":"+inWorkload)
	const id = "s-uring"
	out, err := s.ssh(60*time.Second, id, false, inWorkload+" /etc/hostname 127.0.0.1:2222 | sed s/^/KALI-/; sudo -n "+inWorkload+" /etc/hostname 127.0.0.1:2222 | sed s/^/ROOT-/; "+
		"unshare -U true 2>/dev/null || echo userns-refused; echo PROBE-DONE")
	if err != nil || !strings.Contains(out, "PROBE-DONE") {
		t.Fatalf("io_uring session: %v\n%s", err, out)
	}
	for _, who := range []string{"KALI", "ROOT"} {
		if !strings.Contains(out, who+"-setup=operation not permitted") || strings.Contains(out, who+"-openat") {
			t.Errorf("%s in the workload got an io_uring ring, want io_uring_setup refused (EPERM):\n%s", who, out)
		}
	}
	if !strings.Contains(out, "userns-refused") {
		t.Errorf("a new user namespace was allowed in the workload:\n%s", out)
	}
	if out, err := s.verify(s.harvest(id)); err != nil {
		t.Errorf("verify %s: %v\n%s", id, err, out)
	}
}
