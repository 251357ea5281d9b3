package tests

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/launch"
)

// Each benchmark has a "direct" sub-benchmark: the same work on a local PTY
// with no SSH and no recording, measured in the same run, so the figures in
// the README are ratios against a baseline on the same noisy machine.
//
//	go test -run '^$' -bench . -benchtime 3s -count 5 ./tests/ | tee bench.txt
//	benchstat bench.txt

// BenchmarkSessionOpen measures open latency: from NewSession to the exit
// of `true` on a fresh PTY, recorded.
func BenchmarkSessionOpen(b *testing.B) {
	b.Run("broker", func(b *testing.B) {
		h := newHarness(b)
		c := h.dial(b)
		for b.Loop() {
			s := newPTYSession(b, c)
			if err := s.Run("true"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		local := testLocalLauncher(b, currentUser(b))
		for b.Loop() {
			master, slave, err := pty.Open()
			if err != nil {
				b.Fatal(err)
			}
			p, err := local.Launch(context.Background(), launch.Spec{User: currentUser(b), Command: "true", TTY: slave})
			if err != nil {
				b.Fatal(err)
			}
			go io.Copy(io.Discard, master)
			if _, err := p.Wait(); err != nil {
				b.Fatal(err)
			}
			master.Close()
		}
	})
}

// newPTYSession opens a session with a PTY, the shape of every timed session.
func newPTYSession(b *testing.B, c *gossh.Client) *gossh.Session {
	s, err := c.NewSession()
	if err != nil {
		b.Fatal(err)
	}
	if err := s.RequestPty("xterm", 24, 80, nil); err != nil {
		b.Fatal(err)
	}
	return s
}

func currentUser(tb testing.TB) string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	out, err := exec.Command("id", "-un").Output()
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// BenchmarkCommandRoundTrip measures one delimiter-wrapped command on a
// persistent shell, from writing it to reading its end marker, and reports
// the p50 and p99 of the iterations.
func BenchmarkCommandRoundTrip(b *testing.B) {
	b.Run("broker", func(b *testing.B) {
		h := newHarness(b)
		ss := openShell(b, h.dial(b), map[string]string{"APTL_SESSION_ID": "bench-rt"}, 24, 80)
		roundTrips(b, ss.stdin, ss.received)
	})
	b.Run("direct", func(b *testing.B) {
		cmd := exec.Command("bash", "--login")
		// The same empty home as the broker's sessions (testLocalLauncher):
		// the machine's dotfiles would time them, not the terminal.
		cmd.Env = append(os.Environ(), "HOME="+b.TempDir())
		master, err := pty.Start(cmd)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { master.Close(); cmd.Process.Kill(); cmd.Wait() }()
		received := &testutil.LockedBuffer{}
		go io.Copy(received, master)
		roundTrips(b, master, received)
	})
}

func roundTrips(b *testing.B, stdin io.Writer, received *testutil.LockedBuffer) {
	var lat []time.Duration
	i := 0
	for b.Loop() {
		marker := fmt.Sprintf("D_END_%d:0\r\n", i)
		start := time.Now()
		if _, err := io.WriteString(stdin, delimited(i, "true")); err != nil {
			b.Fatal(err)
		}
		for !strings.Contains(received.String(), marker) {
			time.Sleep(20 * time.Microsecond)
		}
		lat = append(lat, time.Since(start))
		received.Reset()
		i++
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkBulkOutput measures PTY output throughput with recording on: the
// shell writes 64 MiB as fast as the client takes it.
func BenchmarkBulkOutput(b *testing.B) {
	bulkOutput(b, bulkPath{
		newSession: newPTYSession,
		direct: func(b *testing.B, command string) int64 {
			master, err := pty.Start(exec.Command("sh", "-c", command))
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, master) // ends with EIO once the writer exits
			master.Close()
			return n
		},
	})
}

// BenchmarkBulkExecOutput measures output throughput of an exec session
// without a PTY (stdout a pipe), recording on: 64 MiB as fast as the
// client takes it. "direct" reads the same command's pipe locally.
func BenchmarkBulkExecOutput(b *testing.B) {
	bulkOutput(b, bulkPath{
		newSession: func(b *testing.B, c *gossh.Client) *gossh.Session {
			s, err := c.NewSession()
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		direct: func(b *testing.B, command string) int64 {
			cmd := exec.Command("sh", "-c", command)
			var n countWriter
			cmd.Stdout = &n
			if err := cmd.Run(); err != nil {
				b.Fatalf("got %d bytes: %v", n, err)
			}
			return int64(n)
		},
		exact: true,
	})
}

// bulkPath is what tells the two bulk benchmarks apart: the session the
// command runs in and how "direct" reads the command locally.
type bulkPath struct {
	newSession func(b *testing.B, c *gossh.Client) *gossh.Session
	// direct runs command locally and returns the bytes it read.
	direct func(b *testing.B, command string) int64
	// exact: a pipe delivers exactly the command's bytes; a terminal may
	// add bytes of its own (output processing), so through a PTY only a
	// shortfall fails.
	exact bool
}

// bulkOutput is the runner the bulk benchmarks share: "broker" runs a
// command writing 64 MiB in a fresh session on one recorded connection,
// "direct" the same command locally, each reading as fast as it can.
func bulkOutput(b *testing.B, path bulkPath) {
	const size = 64 << 20
	command := fmt.Sprintf("head -c %d /dev/zero", size)
	short := func(n int64) bool { return n < size || path.exact && n != size }
	b.Run("broker", func(b *testing.B) {
		h := newHarness(b)
		c := h.dial(b)
		b.SetBytes(size)
		cpu := startCPU(b)
		for b.Loop() {
			s := path.newSession(b, c)
			var n countWriter
			s.Stdout = &n
			if err := s.Run(command); err != nil || short(int64(n)) {
				b.Fatalf("got %d bytes: %v", n, err)
			}
		}
		cpu.report(b, size)
	})
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if n := path.direct(b, command); short(n) {
				b.Fatalf("got %d bytes", n)
			}
		}
	})
}

// cpuClock reads this process's CPU time (server and in-process client;
// not the shell, a child). On a shared machine the wall-clock MB/s swing
// with the neighbours' load; CPU time per MiB moved is the steadier figure
// of what the path costs.
type cpuClock time.Duration

func startCPU(b *testing.B) cpuClock { return cpuClock(processCPU(b)) }

func (c cpuClock) report(b *testing.B, bytesPerOp int64) {
	used := processCPU(b) - time.Duration(c)
	mib := float64(bytesPerOp) * float64(b.N) / (1 << 20)
	b.ReportMetric(float64(used.Microseconds())/mib, "cpu-µs/MiB")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type countWriter int64

func (w *countWriter) Write(p []byte) (int, error) {
	*w += countWriter(len(p))
	return len(p), nil
}
