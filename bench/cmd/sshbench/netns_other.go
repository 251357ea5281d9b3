//go:build !linux

package main

import (
	"fmt"
	"os"
)

// The benchmark is Linux only (bench.Run says so); these keep the command
// building elsewhere.

func inPrivateNetwork() bool { return false }

func rerunInPrivateNetwork(string, string) int {
	fmt.Fprintln(os.Stderr, "sshbench: network namespaces are Linux only; -host-network runs without one")
	return 1
}

func loopbackUp() error { return nil }
