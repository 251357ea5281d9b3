//go:build !linux

package main

import (
	"fmt"
	"os"
	"runtime"
)

// The server side (a PTY master, the launch adapters, readiness, the host
// key in the sidecar's state) runs only on Linux. Elsewhere, an examiner's
// laptop, the binary still carries verify and export; these subcommands
// say why they cannot run instead of being unknown.
func init() {
	for _, name := range []string{"serve", "health", "hostkey", "witness-relay"} {
		register(name, command{summary: "Linux only (the capture sidecar)", run: linuxOnly(name)})
	}
}

func linuxOnly(name string) func([]string) int {
	return func([]string) int {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture %s: runs only on Linux (this is %s); verify and export work here\n", name, runtime.GOOS)
		return exitFailure
	}
}
