package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/launch/login"
)

// Options are a run's sizes and where its tools are.
type Options struct {
	Rounds     int   // medians are over this many rounds
	GoOpens    int   // Go client opens per target and round
	SSH2Opens  int   // node ssh2 opens per target and round (p90 needs 10)
	RoundTrips int   // commands in the round-trip figure
	PTYBytes   int64 // output of each bulk PTY command
	ExecBytes  int64 // output of the bulk exec command
	Sessions   int   // concurrent sessions
	Conns      int   // connections they share
	Commands   int   // commands each concurrent session runs

	Repo        string   // the module's root: the server is built from it
	Server      string   // a server binary to measure instead of building one
	Only        []string // figure ids to measure (figures.go); empty: all
	SSHD        string   // sshd binary
	User        string   // login user, made if absent
	NodeModules string   // node_modules holding ssh2
	Keep        bool     // keep the work folder (logs, configs, records)
	Progress    io.Writer
}

// FullOptions are the documented run's sizes (docs/BENCHMARKS.md): about
// ten minutes on two cores.
func FullOptions() Options {
	return Options{Rounds: 5, GoOpens: 10, SSH2Opens: 20, RoundTrips: 200, PTYBytes: 16 << 20, ExecBytes: 64 << 20,
		Sessions: 64, Conns: 8, Commands: 20, SSHD: "/usr/sbin/sshd", User: "aptlbench", Repo: "."}
}

// QuickOptions check that everything runs, in about a minute; their
// figures are noisy.
func QuickOptions() Options {
	o := FullOptions()
	o.Rounds, o.GoOpens, o.SSH2Opens, o.RoundTrips = 1, 3, 10, 30
	o.PTYBytes, o.ExecBytes, o.Commands = 4<<20, 16<<20, 3
	return o
}

func (o Options) check() error {
	if o.Rounds < 1 || o.GoOpens < 1 || o.SSH2Opens < 1 || o.RoundTrips < 1 || o.PTYBytes < 1 || o.ExecBytes < 1 ||
		o.Conns < 1 || o.Commands < 1 || o.Sessions < o.Conns || o.Sessions%o.Conns != 0 || o.Sessions/o.Conns > 16 {
		return fmt.Errorf("bench: sizes out of range (every count positive, sessions a multiple of conns, at most 16 a connection): %+v", o)
	}
	for _, id := range o.Only {
		if !slices.ContainsFunc(figures, func(f figure) bool { return f.id == id }) {
			return fmt.Errorf("bench: no figure %q (figures: open, ssh2, rt, pty, exec, concurrent)", id)
		}
	}
	if o.NodeModules == "" {
		return errors.New("bench: no node_modules with ssh2: set APTL_SSH2_NODE_MODULES or run npm install in tests/node")
	}
	if _, err := os.Stat(filepath.Join(o.NodeModules, "ssh2")); err != nil {
		return fmt.Errorf("bench: ssh2 not in %s: %w", o.NodeModules, err)
	}
	return nil
}

// runner is one run: the targets, the login user and the client key.
type runner struct {
	opt     Options
	dir     string
	acct    *account
	key     gossh.Signer
	keyPath string
	targets []*target
}

// Run starts the three targets, measures every figure round by round, and
// returns the results; it stops and removes everything it started.
func Run(opt Options) (res *Results, err error) {
	if runtime.GOOS != "linux" {
		return nil, errors.New("bench: Linux only")
	}
	if err := opt.check(); err != nil {
		return nil, err
	}
	if err := checkTools(opt.SSHD); err != nil {
		return nil, err
	}
	if opt.Progress == nil {
		opt.Progress = io.Discard
	}
	r := &runner{opt: opt}
	if r.opt.Repo, err = filepath.Abs(opt.Repo); err != nil {
		return nil, err
	}
	if r.dir, err = os.MkdirTemp("", "aptl-bench-"); err != nil {
		return nil, err
	}
	// sshd reads authorized_keys as the login user: the folder is
	// readable by all; nothing in it is secret beyond the run.
	os.Chmod(r.dir, 0o755)
	defer func() {
		if opt.Keep {
			fmt.Fprintf(opt.Progress, "work folder kept: %s\n", r.dir)
		} else {
			os.RemoveAll(r.dir)
		}
	}()
	if r.acct, err = ensureAccount(opt.User); err != nil {
		return nil, err
	}
	defer r.acct.remove()
	if err := r.start(); err != nil {
		return nil, err
	}
	defer func() {
		for _, t := range r.targets {
			t.stop()
		}
	}()
	return r.rounds()
}

// BuildServer builds the server (./cmd/aptl-kali-capture of the module at
// repo) into bin, and the login trampoline's own program beside it in the
// same build, as the server looks for it (login.UseTrampolineProgram).
func BuildServer(repo, bin string) error {
	trampoline := filepath.Join(filepath.Dir(bin), login.TrampolineProgram)
	for _, b := range []struct{ out, pkg string }{{bin, "./cmd/aptl-kali-capture"}, {trampoline, "./cmd/aptl-login-trampoline"}} {
		build := exec.Command("go", "build", "-o", b.out, b.pkg)
		build.Dir = repo
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v: %s", b.pkg, err, out)
		}
	}
	return nil
}

// start builds the server and starts A, B and us.
func (r *runner) start() error {
	r.keyPath = filepath.Join(r.dir, "client_key")
	key, err := newKeyFile(r.keyPath)
	if err != nil {
		return err
	}
	r.key = key
	authorized := gossh.MarshalAuthorizedKey(key.PublicKey())
	bin := r.opt.Server
	if bin == "" {
		bin = filepath.Join(r.dir, "aptl-kali-capture")
		if err := BuildServer(r.opt.Repo, bin); err != nil {
			return err
		}
	}
	a, err := startSSHD(r.opt.SSHD, "A", filepath.Join(r.dir, "sshd-bare"), r.acct, authorized, false)
	if err != nil {
		return err
	}
	r.targets = append(r.targets, a)
	b, err := startSSHD(r.opt.SSHD, "B", filepath.Join(r.dir, "sshd-script"), r.acct, authorized, true)
	if err != nil {
		return err
	}
	r.targets = append(r.targets, b)
	us, err := startServe(bin, filepath.Join(r.dir, "serve"), r.acct, authorized)
	if err != nil {
		return err
	}
	r.targets = append(r.targets, us)
	return nil
}

// rounds measures each figure on A, B and us in turn, round after round.
func (r *runner) rounds() (*Results, error) {
	res := newResults()
	for round := range r.opt.Rounds {
		for _, f := range figures {
			if len(r.opt.Only) > 0 && !slices.Contains(r.opt.Only, f.id) {
				continue
			}
			for _, t := range r.targets {
				if err := r.runAlone(t); err != nil {
					return nil, fmt.Errorf("round %d, %s: %w", round+1, f.name, err)
				}
				start := time.Now()
				vals, err := f.measure(r, t, round)
				if err != nil {
					return nil, fmt.Errorf("round %d, %s, %s: %w", round+1, f.name, t.name, err)
				}
				res.add(t.name, vals)
				fmt.Fprintf(r.opt.Progress, "round %d %-34s %-2s %s (%.1f s)\n", round+1, f.name, t.name, formatValues(vals), time.Since(start).Seconds())
			}
		}
		time.Sleep(time.Second) // the last sessions' records are final
		for _, t := range r.targets {
			if err := t.clearRecords(); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

// runAlone stops every other target and starts t if it is not running.
// Only the target being measured runs: the three share one network
// namespace, and our server's packet witness takes every packet of it
// into its ring, which taxed the sshd targets' loopback traffic (A's bulk
// exec output measured 323 MB/s beside an idle capturing server, 425 MB/s
// alone) and so flattered our ratios.
func (r *runner) runAlone(t *target) error {
	for _, o := range r.targets {
		if o != t {
			o.stop()
		}
	}
	if t.cmd != nil {
		return nil
	}
	return t.start()
}

func formatValues(vals map[string]float64) string {
	var b strings.Builder
	for _, k := range valueOrder {
		if v, ok := vals[k]; ok {
			fmt.Fprintf(&b, "%s=%s ", k, num(v))
			if v < 0 {
				fmt.Fprintf(&b, "(%s) ", negativeNote(k))
			}
		}
	}
	return strings.TrimSpace(b.String())
}
