package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/bench"
)

// privateNetworkEnv marks the run that rerunInPrivateNetwork started, so
// that it measures instead of starting another.
const privateNetworkEnv = "APTL_BENCH_IN_PRIVATE_NETWORK"

// inPrivateNetwork reports whether this is that run.
func inPrivateNetwork() bool { return os.Getenv(privateNetworkEnv) == "1" }

// rerunInPrivateNetwork runs this command again, with the same flags, in a
// network namespace of its own, and returns its exit status. The server is
// built here first, in the machine's namespace: the build may need the
// module proxy, which the private namespace cannot reach.
func rerunInPrivateNetwork(server, repo string) int {
	args := os.Args[1:]
	if server == "" {
		dir, err := os.MkdirTemp("", "aptl-bench-server-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "sshbench:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		server = filepath.Join(dir, "aptl-kali-capture")
		if err := bench.BuildServer(repo, server); err != nil {
			fmt.Fprintln(os.Stderr, "sshbench:", err)
			return 1
		}
		args = append(args, "-server", server)
	}
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), privateNetworkEnv+"=1")
	cmd.SysProcAttr = &unix.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintf(os.Stderr, "sshbench: starting the run in a network namespace of its own (needs root): %v; -host-network runs without one\n", err)
		return 1
	}
	return 0
}

// loopbackUp brings up lo, down in a new network namespace: every target
// listens, and every client connects, on 127.0.0.1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading lo's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	return nil
}
