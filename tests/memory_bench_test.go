package tests

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
)

// idleSessions is how many idle sessions BenchmarkIdleSessionMemory holds.
const idleSessions = 64

// BenchmarkIdleSessionMemory measures what an idle session costs this
// process: 64 stock OpenSSH clients, each on its own connection with a PTY
// shell that printed its prompt and waits (the tool servers' shape), and
// per session the growth of the Go heap in use, of goroutine stacks, of
// the process's PSS (/proc/self/smaps_rollup) and of the goroutine count.
// The shells are child processes and not counted. Run it once:
//
//	go test -run '^$' -bench IdleSessionMemory -benchtime 1x -count 5 ./tests/
//
// With the sessions open, APTL_BENCH_HEAP_PROFILE=<file> writes the heap
// profile (go tool pprof -sample_index=inuse_space) and
// APTL_BENCH_GOROUTINES=<file> the goroutines, counted by stack.
func BenchmarkIdleSessionMemory(b *testing.B) {
	if os.Getenv("APTL_BENCH_HEAP_PROFILE") != "" {
		// Every allocation in the profile, not a sample per 512 KiB.
		defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
		runtime.MemProfileRate = 1
	}
	// All 64 connect at once, from one address, on a machine that may be
	// busy: room for them before authentication and ample login time.
	h := newHarness(b, withLimits(func(l *broker.Limits) {
		l.MaxConns, l.MaxSessions = 2*idleSessions, 2*idleSessions
		l.PerSourceMaxStartups = idleSessions
		l.MaxStartups = broker.MaxStartups{Start: idleSessions, Rate: 100, Full: idleSessions + 1}
		l.LoginGrace = 2 * time.Minute
	}))
	for b.Loop() {
		before := readMemory(b)
		var clients []*exec.Cmd
		var stderrs []*os.File
		for i := 0; i < idleSessions; i++ {
			// h.openssh's command is killed after 60 s; these clients
			// stay until the measurement is done.
			bounded := h.openssh(b, "-tt")
			cmd := exec.Command(bounded.Path, bounded.Args[1:]...)
			cmd.Env = bounded.Env
			// An open stdin that sends nothing: the shell stays idle.
			if _, err := cmd.StdinPipe(); err != nil {
				b.Fatal(err)
			}
			// A file, not a buffer: os/exec would copy into a buffer with
			// a goroutine and 32 KiB of this process's own per client.
			stderr, err := os.Create(filepath.Join(b.TempDir(), "ssh.stderr"))
			if err != nil {
				b.Fatal(err)
			}
			defer stderr.Close()
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			clients, stderrs = append(clients, cmd), append(stderrs, stderr)
			b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		}
		deadline := time.Now().Add(3 * time.Minute)
		for h.srv.ActiveSessions() < idleSessions {
			if time.Now().After(deadline) {
				for i, e := range stderrs {
					if said, _ := os.ReadFile(e.Name()); len(said) > 0 {
						b.Logf("ssh %d said: %s", i, said)
					}
				}
				logs := h.logs.String()
				b.Fatalf("%d of %d sessions open; server log ends: %s", h.srv.ActiveSessions(), idleSessions, logs[max(0, len(logs)-3000):])
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The shells print their prompts; then nothing moves.
		time.Sleep(2 * time.Second)
		during := readMemory(b)
		writeProfile(b, "heap", os.Getenv("APTL_BENCH_HEAP_PROFILE"), 0)
		writeProfile(b, "goroutine", os.Getenv("APTL_BENCH_GOROUTINES"), 1)
		per := func(a, z int64) float64 { return float64(z-a) / idleSessions }
		b.ReportMetric(per(before.heap, during.heap)/1024, "heap-KiB/session")
		b.ReportMetric(per(before.stack, during.stack)/1024, "stack-KiB/session")
		b.ReportMetric(per(before.pss, during.pss)/1024, "PSS-KiB/session")
		b.ReportMetric(per(before.goroutines, during.goroutines), "goroutines/session")
		// A PTY shell ignores the client's EOF, as under sshd: the
		// clients go away instead.
		for _, cmd := range clients {
			cmd.Process.Kill()
		}
		waitFor(b, 2*time.Minute, "idle sessions closed", func() bool { return h.srv.ActiveSessions() == 0 })
	}
}

type memory struct{ heap, stack, pss, goroutines int64 }

// readMemory collects garbage twice (sync.Pool keeps its items for one
// more cycle), returns freed memory to the kernel, and reads the figures.
func readMemory(b *testing.B) memory {
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memory{heap: int64(ms.HeapInuse), stack: int64(ms.StackInuse), pss: pssBytes(b), goroutines: int64(runtime.NumGoroutine())}
}

// pssBytes is this process's proportional set size.
func pssBytes(b *testing.B) int64 {
	f, err := os.Open("/proc/self/smaps_rollup")
	if err != nil {
		b.Skipf("no smaps_rollup: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("Pss:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(rest, []byte("kB")))), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no Pss line in smaps_rollup")
	return 0
}

// writeProfile writes the named runtime profile to path, if path is set.
func writeProfile(b *testing.B, name, path string, debug int) {
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, debug); err != nil {
		b.Fatal(err)
	}
}
