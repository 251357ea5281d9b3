// Command sshbench runs the side-by-side benchmark of package bench: sshd
// bare (A), sshd with the script(1) ForceCommand (B) and this server with
// full recording (us), on loopback, alternating, and prints the Markdown
// table of medians and ratios (docs/BENCHMARKS.md). It runs in a network
// namespace of its own unless -host-network says otherwise: our server's
// pcap witness captures every packet of its namespace for every session,
// so on a shared machine other programs' traffic would be measured too.
// Run it as root from the module's root:
//
//	go run ./bench/cmd/sshbench            # full run, about 10 minutes
//	go run ./bench/cmd/sshbench -quick     # one small round, about a minute
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/aptl/aptl-kali-capture/bench"
)

func main() {
	quick := flag.Bool("quick", false, "one small round: checks that everything runs; the figures are noisy")
	rounds := flag.Int("rounds", 0, "rounds to take medians over (default 5, 1 with -quick)")
	keep := flag.Bool("keep", false, "keep the work folder: configs, server logs, the last round's records")
	user := flag.String("user", "aptlbench", "login user of every target; made with useradd (and removed) if absent")
	server := flag.String("server", "", "measure this server binary instead of building ./cmd/aptl-kali-capture")
	only := flag.String("only", "", "comma-separated figures to measure: open, ssh2, rt, pty, exec, concurrent (default all)")
	sshd := flag.String("sshd", "/usr/sbin/sshd", "sshd binary (Debian openssh-server)")
	hostNetwork := flag.Bool("host-network", false, "run in this machine's network namespace, not a private one: our server's pcap witness then also captures every other program's traffic")
	flag.Parse()
	opt := bench.FullOptions()
	if *quick {
		opt = bench.QuickOptions()
	}
	if *rounds > 0 {
		opt.Rounds = *rounds
	}
	opt.Keep, opt.User, opt.SSHD, opt.Progress = *keep, *user, *sshd, os.Stderr
	opt.Server = *server
	if *only != "" {
		opt.Only = strings.Split(*only, ",")
	}
	opt.NodeModules = os.Getenv("APTL_SSH2_NODE_MODULES")
	if opt.NodeModules == "" {
		opt.NodeModules = filepath.Join("tests", "node", "node_modules")
	}
	network := "this machine's network namespace"
	if !*hostNetwork {
		if !inPrivateNetwork() {
			os.Exit(rerunInPrivateNetwork(opt.Server, opt.Repo))
		}
		if err := loopbackUp(); err != nil {
			fmt.Fprintln(os.Stderr, "sshbench: in the private network namespace:", err)
			os.Exit(1)
		}
		network = "a private network namespace"
	}
	start := time.Now()
	res, err := bench.Run(opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sshbench:", err)
		os.Exit(1)
	}
	res.WriteTable(os.Stdout, opt.Rounds)
	fmt.Printf("\n%s; %s; run took %s\n", machine(), network, time.Since(start).Round(time.Second))
}

// machine names what the figures were measured on.
func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimLeft(name, " \t:"))
				break
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d CPUs (%s), kernel %s, %s", runtime.NumCPU(), cpu, strings.TrimSpace(string(kernel)), runtime.Version())
}
