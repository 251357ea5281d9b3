//go:build linux

package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
)

func init() {
	register("hostkey", command{summary: "print the host key's known_hosts line and fingerprint", run: runHostKey})
}

// runHostKey prints what a lab needs to pin the sidecar's host key. The key
// is created if the sidecar has not started yet, so it can be pinned first.
func runHostKey(args []string) int {
	e := newEnvFlags("hostkey")
	var stateDir, host string
	e.String(&stateDir, "state-dir", "APTL_CAPTURE_STATE_DIR", defaultStateDir, "private state directory holding "+broker.HostKeyFile)
	e.String(&host, "host", "APTL_CAPTURE_HOSTKEY_HOST", "aptl-kali-capture", "host pattern for the known_hosts line, e.g. [kali]:22")
	err := e.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture hostkey: %v\n", err)
		return exitUsage
	}
	signer, err := broker.LoadOrCreateKey(filepath.Join(stateDir, broker.HostKeyFile), "aptl-kali-capture host key")
	if err != nil {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture hostkey: %v\n", err)
		return exitFailure
	}
	pub := signer.PublicKey()
	fmt.Printf("%s %s\n", host, strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pub))))
	fmt.Println(gossh.FingerprintSHA256(pub))
	return exitOK
}
