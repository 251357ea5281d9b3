//go:build linux

package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
)

func init() {
	register("health", command{summary: "exit 0 when the sidecar is ready: readiness file ok and the SSH server answering", run: runHealth})
}

// healthTimeout bounds the SSH banner check.
const healthTimeout = 2 * time.Second

func runHealth(args []string) int {
	e := newEnvFlags("health")
	var readyFile, listen string
	e.String(&readyFile, "ready-file", "APTL_CAPTURE_READY_FILE", defaultReadyFile, "readiness file the server writes")
	e.String(&listen, "listen", "APTL_CAPTURE_LISTEN", defaultListen, "the server's listen address")
	err := e.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture health: %v\n", err)
		return exitUsage
	}
	if err := checkHealth(readyFile, listen); err != nil {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture health: %v\n", err)
		return exitFailure
	}
	fmt.Println("healthy")
	return exitOK
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
	for _, k := range []string{"pty", "launch"} {
		if state[k] != stateOK {
			return fmt.Errorf("not ready: %s=%q", k, state[k])
		}
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", listen, err)
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
