package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/launch"
	"github.com/aptl/aptl-kali-capture/launch/agentclient"
)

// agentSuites are the client suites of the broker core that run again with
// the agent adapter in place of local. Suites that wrap the launcher
// (failure_test.go) or test only the broker's refusals are not repeated.
var agentSuites = []struct {
	name string
	fn   func(*testing.T, ...harnessOption)
}{
	{"PersistentShellProtocol", testPersistentShellProtocol},
	{"RawModeByteFidelity", testRawModeByteFidelity},
	{"TerminalSemantics", testTerminalSemantics},
	{"OpenSSHExecWithoutPTY", testOpenSSHExecWithoutPTY},
	{"OpenSSHPTYShell", testOpenSSHPTYShell},
	{"OpenSSHCloseOrder", testOpenSSHCloseOrder},
	{"PythonClients", testPythonClients},
	{"ClientCloseHangsUpShell", testClientCloseHangsUpShell},
	{"ShutdownFinalizesOpenSessions", testShutdownFinalizesOpenSessions},
	{"StalledClientLosesNothing", testStalledClientLosesNothing},
	{"NoLeaksAfterSequentialSessions", testNoLeaksAfterSequentialSessions},
	{"BackgroundJobHoldingTerminal", testBackgroundJobHoldingTerminal},
	{"ShutdownWithStalledClient", testShutdownWithStalledClient},
	{"Signals", testSignals},
	{"ExitSignalFromShell", testExitSignalFromShell},
	{"SecretsNeverLogged", testSecretsNeverLogged},
	{"PTYEOFCharOpenSSHPiped", testPTYEOFCharOpenSSHPiped},
	{"PTYEOFCharFallback", testPTYEOFCharFallback},
}

// TestAgentClientSuites runs the client suites with every harness's
// sessions started by a real aptl-launch-agent (the static binary) on a
// socket of its own. The agent shares this process's namespaces, so it
// runs with its development flag; TestAgentNamespaceIsolation covers the
// separated deployment. Each agent's log must hold no canary of the suites.
func TestAgentClientSuites(t *testing.T) {
	bin := buildAgent(t)
	userFlags := testAgentUserFlags(t)
	var agents []*agentProc
	newAgentLauncher := func(tb testing.TB) launch.Launcher {
		dir, err := os.MkdirTemp("", "aptl-agent-") // short: sun_path holds 107 bytes
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { os.RemoveAll(dir) })
		socket := filepath.Join(dir, "agent.sock")
		argv := append([]string{bin, "-socket", socket, "-insecure-allow-same-pidns", "-log-level", "debug"}, userFlags...)
		if os.Geteuid() == 0 {
			// The agent reads /etc/passwd itself: in a mount namespace of
			// its own, the tests' passwd is bound over it, so its sessions
			// log in with the test's home, as the local adapter's do
			// (testLocalLauncher), not with the machine's dotfiles.
			argv = append([]string{"unshare", "--mount", "--propagation", "private", "--",
				"sh", "-c", `mount --bind "$0" /etc/passwd && exec "$@"`, testPasswd(tb, currentUser(tb))}, argv...)
		}
		agents = append(agents, startAgent(tb, socket, argv...))
		a, err := agentclient.NewAgent(socket, agentclient.WithAgentUID(os.Geteuid()), agentclient.InsecureAllowAgentInSamePIDNS())
		if err != nil {
			tb.Fatal(err)
		}
		return a
	}
	for _, s := range agentSuites {
		agents = agents[:0]
		t.Run(s.name, func(t *testing.T) {
			s.fn(t, withLauncherFrom(func() launch.Launcher { return newAgentLauncher(t) }))
			for _, ap := range agents {
				checkAgentLog(t, ap.logs.String())
			}
		})
	}
}

// checkAgentLog: the agent logs JSON lines, and never the canaries,
// secrets or markers the suites send.
func checkAgentLog(t *testing.T, logs string) {
	t.Helper()
	for _, canary := range []string{"CANARY7f3a9", "hunter2-not-echoed", "héllo", "D_START_", "SEQ_BEGIN"} {
		noCanary(t, "the agent's log", logs, canary)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if line != "" && !strings.HasPrefix(line, "{") {
			t.Errorf("agent log line is not JSON: %q", line)
		}
	}
}
