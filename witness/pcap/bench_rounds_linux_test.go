package pcap_test

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/witness/pcap"
)

// engineRound captures one burst with the engine through a session: the
// pcap Source opens a tap writing rotated pcapng files (the settings'
// defaults) and a checkpoint flushes and fsyncs them every second, as the
// recorder does. CPU is this process's own user+system time from the
// window's start to its close (the sender is another process).
func (l *benchLab) engineRound(b *testing.B, size, count int) roundResult {
	dir := benchDir(b)
	defer os.RemoveAll(dir)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var eng *pcap.Engine
	testutil.InNetns(b, l.side, func() (err error) {
		eng, err = pcap.StartEngine(benchListenPort, log)
		return err
	})
	defer eng.Close()
	src := pcap.NewSource(pcap.Limits{RotateBytes: pcap.DefaultRotateMB << 20, Files: pcap.DefaultFiles}, log, "")
	src.SetEngine(eng, "")
	w, attrs := src.Open(recorder.WitnessOpen{Mkdir: func() (*os.File, error) { return os.Open(dir) }, Notify: func() {}})
	if attrs[vocab.AttrPcap] != vocab.PcapOn {
		b.Fatalf("pcap source did not open: %v", attrs)
	}
	nop := func(string, map[string]string) error { return nil }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := w.Checkpoint(nop); err != nil {
					b.Errorf("checkpoint: %v", err)
				}
			}
		}
	})
	w.Start()
	cpu0 := selfCPU(b)
	took := l.send(b, size, count)
	closed, err := w.Close(nop)
	cpu := selfCPU(b) - cpu0
	close(stop)
	wg.Wait()
	if err != nil {
		b.Fatalf("close the session's capture: %v", err)
	}
	return roundResult{sent: int64(count), captured: attrInt(b, closed, vocab.AttrPcapPackets),
		drops: attrInt(b, closed, vocab.AttrPcapKernelDrops), sendTime: took, cpu: cpu}
}

// tcpdumpRound captures one burst with the lab's command,
// `tcpdump -i any -w <file> -C 100 -W 10 -U 'not port 22'` (plus -Z root:
// Debian's tcpdump otherwise drops to its own user and cannot open the next
// rotated file in a root-owned folder), in the capture namespace. CPU is
// tcpdump's whole life (start-up included, a few milliseconds).
func (l *benchLab) tcpdumpRound(b *testing.B, size, count int) roundResult {
	dir := benchDir(b)
	defer os.RemoveAll(dir)
	cmd := exec.Command("ip", "netns", "exec", l.side, "tcpdump", "-i", "any", "-w", filepath.Join(dir, "session.pcap"),
		"-C", "100", "-W", "10", "-U", "-Z", "root", "not port 22")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("start tcpdump: %v", err)
	}
	defer cmd.Process.Kill()
	pollUntil(b, 10*time.Second, "tcpdump listening", func() bool { return bytes.Contains(stderr.Bytes(), []byte("listening on")) })
	took := l.send(b, size, count)
	// With -U every packet is written as it is read: once the files stop
	// growing, tcpdump has caught up with its ring (the engine's Close
	// waits for the same).
	last := int64(-1)
	pollUntil(b, 10*time.Second, "tcpdump caught up", func() bool {
		n := dirSize(dir)
		settled := n == last
		last = n
		return settled
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		b.Fatalf("stop tcpdump: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("tcpdump: %v: %s", err, stderr.Bytes())
	}
	st := cmd.ProcessState
	return roundResult{sent: int64(count), captured: tcpdumpCount(b, stderr.Bytes(), "captured"),
		drops: tcpdumpCount(b, stderr.Bytes(), "dropped by kernel"), sendTime: took, cpu: st.UserTime() + st.SystemTime()}
}

func benchDir(b *testing.B) string {
	dir, err := os.MkdirTemp("", "aptl-pcap-bench-")
	if err != nil {
		b.Fatalf("make the capture folder: %v", err)
	}
	return dir
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func attrInt(b *testing.B, attrs map[string]string, key string) int64 {
	n, err := strconv.ParseInt(attrs[key], 10, 64)
	if err != nil {
		b.Fatalf("close attribute %s=%q: %v", key, attrs[key], err)
	}
	return n
}

// tcpdumpCount reads "N packets <what>" from tcpdump's exit summary.
func tcpdumpCount(b *testing.B, stderr []byte, what string) int64 {
	m := regexp.MustCompile(`(?m)^(\d+) packets? ` + regexp.QuoteMeta(what) + `$`).FindSubmatch(stderr)
	if m == nil {
		b.Fatalf("tcpdump's summary has no %q line: %s", what, stderr)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

func dirSize(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}

// pollUntil polls cond every 100 ms until it holds or timeout passes.
func pollUntil(b *testing.B, timeout time.Duration, what string, cond func() bool) {
	b.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			b.Fatalf("timed out waiting for %s", what)
		}
	}
}

// lockedBuffer is a bytes.Buffer a child process writes while the
// benchmark reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}
