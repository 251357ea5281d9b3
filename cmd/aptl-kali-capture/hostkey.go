//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/aptl/aptl-kali-capture/broker"
)

func init() {
	register("hostkey", command{summary: "print the host key's known_hosts line (fingerprint on stderr)", run: runHostKey})
}

// runHostKey prints what a lab needs to pin the sidecar's host key: the
// known_hosts line alone on stdout (so `hostkey >> known_hosts` is right)
// and the fingerprint on stderr. It reads the existing public key and
// creates none unless --create is given: a key made by this command in the
// wrong folder would be pinned while the server serves another.
func runHostKey(args []string) int {
	e := newEnvFlags("hostkey")
	var stateDir, host, listen string
	var create bool
	e.String(&stateDir, "state-dir", "APTL_CAPTURE_STATE_DIR", defaultStateDir, "private state directory holding "+broker.HostKeyFile)
	e.String(&host, "host", "APTL_CAPTURE_HOSTKEY_HOST", "", "host pattern for the known_hosts line, e.g. [kali]:22 (default: the server's listen address, [127.0.0.1]:2222 on the embedded default)")
	e.String(&listen, "listen", "APTL_CAPTURE_LISTEN", "", "the server's listen address, for the default --host (default: the one its readiness file names, else "+defaultListen+")")
	e.FlagSet.BoolVar(&create, "create", false, "generate the host key when there is none yet, to pin it before the first start")
	if err := e.Parse(args); err != nil {
		return failUsage("hostkey", err)
	}
	if host == "" {
		host = knownHostsPattern(serverListenAddr(listen, resolveReadyFile("", stateDir)))
	}
	pub, err := hostPublicKey(filepath.Join(stateDir, broker.HostKeyFile), create)
	if err != nil {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture hostkey: %v\n", err)
		return exitFailure
	}
	fmt.Printf("%s %s\n", host, strings.TrimSpace(string(gossh.MarshalAuthorizedKey(pub))))
	fmt.Fprintln(os.Stderr, gossh.FingerprintSHA256(pub))
	return exitOK
}

// serverListenAddr is the address a client of this server dials: the
// --listen given, else the running server's own (its readiness file),
// else the embedded default.
func serverListenAddr(listen, readyFile string) string {
	if listen != "" {
		return listen
	}
	if a := readinessValue(readyFile, "listen_addr"); a != "unknown" && a != "" {
		return a
	}
	return defaultListen
}

// knownHostsPattern is the known_hosts host of a listen address as ssh
// looks it up: "[127.0.0.1]:2222", or the bare host on port 22. A server
// listening on every address is reached on this machine at loopback, as
// health dials it; another name needs --host.
func knownHostsPattern(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return knownhosts.Normalize(net.JoinHostPort(host, port))
}

// maxPublicKeyFile bounds the .pub read: one key line.
const maxPublicKeyFile = 16 << 10

// hostPublicKey reads keyPath+".pub", or with create makes the key pair
// first when it does not exist.
func hostPublicKey(keyPath string, create bool) (gossh.PublicKey, error) {
	if create {
		signer, err := broker.LoadOrCreateKey(keyPath, "aptl-kali-capture host key")
		if err != nil {
			return nil, err
		}
		return signer.PublicKey(), nil
	}
	f, err := os.Open(keyPath + ".pub")
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no host key at %s.pub: start the server once, or pass --create to generate it, or name its state directory with --state-dir", keyPath)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPublicKeyFile))
	if err != nil {
		return nil, fmt.Errorf("read %s.pub: %w", keyPath, err)
	}
	pub, _, _, _, err := gossh.ParseAuthorizedKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s.pub is not a public key: %w", keyPath, err)
	}
	return pub, nil
}
