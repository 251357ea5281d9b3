//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

func init() {
	register("health", command{summary: "exit 0 when the sidecar is ready: readiness file ok and the SSH server answering", run: runHealth})
}

// healthTimeout bounds the SSH banner check.
const healthTimeout = 2 * time.Second

func runHealth(args []string) int {
	e := newEnvFlags("health")
	var readyFile, listen, stateDir string
	e.String(&stateDir, "state-dir", "APTL_CAPTURE_STATE_DIR", defaultStateDir, "the server's state directory, which holds its readiness file")
	e.String(&readyFile, "ready-file", "APTL_CAPTURE_READY_FILE", "", "readiness file the server writes (default: <state-dir>/ready)")
	e.String(&listen, "listen", "APTL_CAPTURE_LISTEN", "", "the server's listen address (default: the one its readiness file names)")
	if err := e.Parse(args); err != nil {
		return failUsage("health", err)
	}
	path := resolveReadyFile(readyFile, stateDir)
	if err := checkHealth(path, listen); err != nil {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture health: %v\n", err)
		return exitFailure
	}
	fmt.Println(healthLine(path))
	return exitOK
}

// healthLine is what health prints when it passes: the witnesses' and
// the disk's states, reported, never required (capture is no login
// precondition), and the audit counts.
func healthLine(path string) string {
	line := "healthy"
	for _, k := range []string{"pcap", "auditd", "procacct"} {
		line += " " + k + "=" + readinessValue(path, k)
	}
	// The disk state too, and never as a failure: an orchestrator that
	// restarted an unhealthy sidecar would end every open session, whose
	// transcripts a low or critical volume still records.
	if v := readinessValue(path, vocab.ReadyKeyDisk); v != "unknown" {
		line += " " + vocab.ReadyKeyDisk + "=" + v
	}
	// Shipping likewise, where a bucket is set: an outage of the store is
	// no reason to restart the sidecar, whose local copy stays
	// authoritative.
	if v := readinessValue(path, "ship"); v != "unknown" && v != "off" {
		line += " ship=" + v + " ship_lag_seconds=" + readinessValue(path, "ship_lag_seconds")
	}
	for _, k := range []string{"audit_uring", "audit_sessions", "audit_events", "audit_lost", "audit_overruns"} {
		if v := readinessValue(path, k); v != "unknown" {
			line += " " + k + "=" + v
		}
	}
	return line
}

// checkHealth reads the readiness file, reports a taken listen address
// with its own message, and requires pty and launch to be ok, then requires the SSH server to send its version line.
func checkHealth(readyFile, listen string) error {
	data, err := os.ReadFile(readyFile)
	if err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	state := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			state[k] = v
		}
	}
	if state["listen"] == stateTaken {
		return fmt.Errorf("not ready: listen=taken: %s is held by another process; sessions are not being recorded", state["listen_addr"])
	}
	if state["launch"] == stateDegraded {
		// Said plainly: the sidecar runs, but no session can start now.
		return fmt.Errorf("not ready: launch=degraded: the launch agent in the workload does not answer; session starts wait for it (--agent-wait), then are refused")
	}
	for _, k := range []string{"pty", "launch"} {
		if state[k] != stateOK {
			return fmt.Errorf("not ready: %s=%q", k, state[k])
		}
	}
	addr, err := readyFileOwner(readyFile, state, listen)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, port), healthTimeout)
	if err != nil {
		return fmt.Errorf("SSH server: %w", err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(healthTimeout))
	banner, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !answeredByServer(banner) {
		return fmt.Errorf("SSH server did not answer with its version line")
	}
	return nil
}

// readyFileOwner checks that the readiness file is that of a server that
// still runs (its pid) and, when --listen was given, of the server on that
// address; it returns the address to check. A file left by a server that
// was killed, or one of another instance, proves nothing.
func readyFileOwner(readyFile string, state map[string]string, listen string) (string, error) {
	if pid, err := strconv.Atoi(state["pid"]); err == nil && pid > 0 {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return "", fmt.Errorf("not ready: %s was written by process %d, which no longer runs", readyFile, pid)
		}
	}
	fileListen := state["listen_addr"]
	switch {
	case fileListen == "" && listen == "":
		return defaultListen, nil
	case fileListen == "":
		return listen, nil
	case listen != "" && !sameListenAddr(listen, fileListen):
		return "", fmt.Errorf("not ready: %s is the server's on %s, not on %s", readyFile, fileListen, listen)
	}
	return fileListen, nil
}

// sameListenAddr compares two listen addresses by port, and by host unless
// either listens on every address.
func sameListenAddr(a, b string) bool {
	ah, ap, err1 := net.SplitHostPort(a)
	bh, bp, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || ap != bp {
		return false
	}
	unspecified := func(h string) bool { ip := net.ParseIP(h); return h == "" || ip != nil && ip.IsUnspecified() }
	return ah == bh || unspecified(ah) || unspecified(bh)
}

// answeredByServer accepts the server's version line, and also the line it
// sends a connection it refuses before authentication (broker/preauth.go).
// Why: the workload shares the network namespace and can hold every
// pre-authentication slot; if health then failed, an orchestrator would
// restart the sidecar and end every open session, which is the attack.
// The refusal line still proves what health is for: the process is up, its
// accept loop runs and the gate answers. Capacity is not health, and a
// restart would not restore it while the flood goes on. A private Unix
// socket would prove no more about the TCP listener the clients use, and
// adds a second way in; the refusal line reveals nothing the version line
// does not, and costs the server one non-blocking send.
func answeredByServer(line string) bool {
	return strings.HasPrefix(line, "SSH-2.0-aptl-kali-capture") || strings.HasPrefix(line, broker.RefusalPrefix)
}

// readinessValue returns key's value in the readiness file, or "unknown".
func readinessValue(readyFile, key string) string {
	data, err := os.ReadFile(readyFile)
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && k == key {
			return v
		}
	}
	return "unknown"
}
