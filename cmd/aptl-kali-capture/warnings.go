//go:build linux

package main

import (
	"flag"
	"log/slog"
	"net"
	"strings"

	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/local"
)

// Warnings at start, for settings that work but are probably not what the
// operator meant.

// localUserCheck returns the broker's account check for the local adapter
// (an allowed name without an account is refused as sshd's "Invalid
// user"), and warns about each such name in --users. The agent adapter
// checks its users in the workload, whose accounts the sidecar cannot see.
func localUserCheck(l launch.Launcher, users []string, log *slog.Logger) func(string) bool {
	loc, ok := l.(*local.Local)
	if !ok {
		return nil
	}
	for _, u := range users {
		if !loc.UserExists(u) {
			log.Warn("login user has no account; its logins will be refused", "user", u, "setting", "--users / APTL_CAPTURE_USERS")
		}
	}
	return loc.UserExists
}

// warnDevClientKey warns when the generated development client key (whose
// private half lies in the state directory) lets anyone in from beyond
// loopback.
func warnDevClientKey(log *slog.Logger, addr net.Addr, clientKey string) {
	tcp, ok := addr.(*net.TCPAddr)
	if clientKey == "" || !ok || tcp.IP.IsLoopback() {
		return
	}
	log.Warn("the generated development client key is authorized while listening beyond loopback; set --authorized-keys to your own keys",
		"addr", addr.String(), "client_key", clientKey)
}

// otherCaptureEnv are APTL_CAPTURE_* names that are not serve settings
// but are not misspelt either: other subcommands' settings and the test
// suite's switch.
var otherCaptureEnv = []string{"APTL_CAPTURE_HOSTKEY_HOST", "APTL_CAPTURE_SLOW_TESTS"}

// unknownCaptureEnv returns the APTL_CAPTURE_* names in environ that no
// setting reads: a misspelt name (APTL_CAPTURE_LISTN) would otherwise be
// ignored without a word. Only names are returned, never values.
func unknownCaptureEnv(fs *flag.FlagSet, environ []string) []string {
	known := map[string]bool{}
	for _, n := range otherCaptureEnv {
		known[n] = true
	}
	fs.VisitAll(func(f *flag.Flag) {
		// cliconfig ends every usage with "(env NAME)".
		if i := strings.LastIndex(f.Usage, "(env "); i >= 0 {
			known[strings.TrimSuffix(f.Usage[i+len("(env "):], ")")] = true
		}
	})
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "APTL_CAPTURE_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	return unknown
}
