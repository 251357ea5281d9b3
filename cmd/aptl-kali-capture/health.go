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
	err := e.parse(args)
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

// checkHealth reads the readiness file and requires pty and launch to be
// ok, then requires the SSH server to send its version line.
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
	if err != nil || !strings.HasPrefix(banner, "SSH-2.0-aptl-kali-capture") {
		return fmt.Errorf("SSH server did not answer with its version line")
	}
	return nil
}
