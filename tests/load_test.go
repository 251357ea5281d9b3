package tests

import (
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
)

// loadPalette is what the load test's sessions run: output with every byte
// value, escape sequences (colour, title, clear screen) and long lines.
func loadPalette(allBytes string) []string {
	return []string{
		"cat " + allBytes,
		`printf '\033[1;31mred\033[0m \033]0;title\007\033[2J\033[H\033[?25l\033[?25h\n'`,
		`head -c 6000 /dev/zero | tr '\0' L; echo`,
		"seq 1 300",
	}
}

// TestLoadConcurrentSessions: 200 concurrent persistent sessions (100 node
// ssh2 on 10 connections, 100 x/crypto on 10 connections; 20 in the short
// form), each running random palette commands with random exit codes, then
// closed with EOF under pty-eof=hangup. Every record's output equals what
// its client received, byte for byte, and its input what was sent. The
// command latency percentiles and the server's heap per idle session are
// logged, not asserted.
func TestLoadConcurrentSessions(t *testing.T) {
	nodeClient(t)
	perKind, conns, commands := 10, 2, 3
	if slowTests {
		perKind, conns, commands = 100, 10, 5
	}
	h := newHarness(t, withPTYEOF(broker.PTYEOFHangup), withLimits(func(l *broker.Limits) {
		l.MaxSessions = 2*perKind + 8
	}))
	allBytes := filepath.Join(t.TempDir(), "allbytes")
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	if err := os.WriteFile(allBytes, b, 0o644); err != nil {
		t.Fatal(err)
	}
	palette := loadPalette(allBytes)
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)

	outDir, hold := t.TempDir(), filepath.Join(t.TempDir(), "hold")
	nodeDone := make(chan struct{})
	var nodeRes struct {
		Latencies []float64     `json:"latencies"`
		Errors    int           `json:"errors"`
		Closes    []closeResult `json:"closes"`
	}
	var nodeErr error
	go func() {
		defer close(nodeDone)
		nodeErr = scenario(t, h, map[string]any{"scenario": "load", "run": "load", "prefix": "n", "sessions": perKind,
			"conns": conns, "commands": commands, "palette": palette, "outDir": outDir, "holdFile": hold}, &nodeRes)
	}()
	goShells, goLat := runGoLoad(t, h, perKind, conns, commands, palette)

	// All sessions are open now; the node ones idle until hold exists.
	waitFor(t, 2*time.Minute, "the node sessions idle", func() bool {
		select {
		case <-nodeDone:
			t.Fatalf("node load scenario ended early: %v", nodeErr)
		default:
		}
		_, err := os.Stat(hold + ".ready")
		return err == nil
	})
	if n := h.srv.ActiveSessions(); n != 2*perKind {
		t.Errorf("%d sessions open at once, want %d", n, 2*perKind)
	}
	for _, ss := range goShells {
		ss.stdin.Close() // EOF: the shell is hung up, the record finalized
	}
	for _, ss := range goShells {
		ss.finish()
	}
	waitFor(t, 30*time.Second, "the x/crypto sessions finalized", func() bool { return h.srv.ActiveSessions() == perKind })
	runtime.GC()
	var idle runtime.MemStats
	runtime.ReadMemStats(&idle)
	t.Logf("server heap with %d idle node sessions: %d KiB above baseline, %.1f KiB per idle session (goroutines %d)",
		perKind, (int64(idle.HeapInuse)-int64(base.HeapInuse))>>10, float64(int64(idle.HeapInuse)-int64(base.HeapInuse))/1024/float64(perKind), runtime.NumGoroutine())
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	<-nodeDone
	if nodeErr != nil {
		t.Fatal(nodeErr)
	}
	if nodeRes.Errors != 0 {
		t.Errorf("node: %d commands with a wrong exit code", nodeRes.Errors)
	}
	for i, c := range nodeRes.Closes {
		if c.How != "close" {
			t.Errorf("node session %d: close %s", i, c.How)
		}
	}
	t.Logf("node ssh2 command latency over %d commands: p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		len(nodeRes.Latencies), percentile(nodeRes.Latencies, 50), percentile(nodeRes.Latencies, 99), percentile(nodeRes.Latencies, 100))
	t.Logf("x/crypto command latency over %d commands (10 ms polling resolution): p50 %.0f ms, p99 %.0f ms",
		len(goLat), percentile(goLat, 50), percentile(goLat, 99))
	h.waitIdle(t)
	for i := 0; i < perKind; i++ {
		id := "n" + strconv.Itoa(i)
		checkFinalized(t, h.sessionDir("load", id), h.hostKey, "client-eof")
		checkClientBytes(t, h.sessionDir("load", id), outDir, id)
	}
	for i, ss := range goShells {
		dir := h.sessionDir("load", "g"+strconv.Itoa(i))
		checkFinalized(t, dir, h.hostKey, "client-eof")
		if got, want := replay(t, dir, "out"), []byte(ss.received.String()); string(got) != string(want) {
			t.Errorf("session g%d: recorded output differs from received at byte %d", i, firstDiff(got, want))
		}
		if got := replay(t, dir, "in"); string(got) != ss.sent.String() {
			t.Errorf("session g%d: recorded input differs from sent at byte %d", i, firstDiff(got, ss.sent.Bytes()))
		}
	}
}

// runGoLoad opens n x/crypto PTY shells over conns connections, runs
// commands random palette commands in each (concurrently) and returns the
// open shells and the command latencies in ms.
func runGoLoad(t *testing.T, h *harness, n, conns, commands int, palette []string) ([]*shellSession, []float64) {
	t.Helper()
	clients := make([]*gossh.Client, conns)
	for i := range clients {
		clients[i] = h.dial(t)
	}
	// The shells start one at a time (their first command is `true`): a
	// login shell's rc files may take a lock (pyenv's rehash does), which
	// hundreds of shells starting at once contend on. The commands that
	// follow run concurrently.
	shells := make([]*shellSession, n)
	for i := range shells {
		shells[i] = openShell(t, clients[i%conns], loadEnv(i), 24, 80)
		shells[i].send(delimited(0, "true"))
		shells[i].waitOutput(regexp.MustCompile(`D_END_0:0\r\n`))
	}
	var mu sync.Mutex
	var lat []float64
	var wg sync.WaitGroup
	for i, ss := range shells {
		wg.Add(1)
		go func(i int, ss *shellSession) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(i)))
			for k := 1; k <= commands; k++ {
				code := rng.Intn(4)
				cmd := palette[rng.Intn(len(palette))]
				start := time.Now()
				line := delimited(k, fmt.Sprintf("%s; (exit %d)", cmd, code))
				if _, err := io.WriteString(ss.stdin, line); err != nil {
					t.Errorf("session g%d: write: %v", i, err)
					return
				}
				ss.sent.WriteString(line) // this goroutine owns ss
				// Polled (not waitOutput: a failure here must not end
				// the test from this goroutine).
				end := regexp.MustCompile(fmt.Sprintf(`D_END_%d:%d\r\n`, k, code))
				for deadline := time.Now().Add(time.Minute); !end.MatchString(ss.received.String()); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						got := ss.received.String()
						t.Errorf("session g%d: command %d did not end with status %d; stderr %q, last output %q", i, k, code, ss.stderr.String(), got[max(0, len(got)-200):])
						return
					}
				}
				mu.Lock()
				lat = append(lat, float64(time.Since(start).Microseconds())/1000)
				mu.Unlock()
			}
		}(i, ss)
	}
	wg.Wait()
	return shells, lat
}

func loadEnv(i int) map[string]string {
	return map[string]string{"APTL_SESSION_ID": "g" + strconv.Itoa(i), "APTL_RUN_ID": "load"}
}
