//go:build linux

package main

import (
	"bufio"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/diskstate"
)

// versionServer answers every connection with the sidecar's version line,
// as the SSH server does, for health's banner check.
func versionServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-aptl-kali-capture_test\r\n"))
			bufio.NewReader(c).ReadString('\n')
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// TestHealthReportsTheDiskAndPasses: the readiness file carries
// disk=ok|low|critical, rewritten at each transition, and health prints
// it and still passes on a low or critical volume: failing would have the
// orchestrator restart the sidecar and end every open session.
func TestHealthReportsTheDiskAndPasses(t *testing.T) {
	var free atomic.Int64
	free.Store(500)
	src := func() (diskstate.Usage, error) { return diskstate.Usage{Free: free.Load(), Size: 1000}, nil }
	m, err := diskstate.New(src, diskstate.Thresholds{LowPercent: 10, CriticalPercent: 5, ResumePercent: 15})
	if err != nil {
		t.Fatal(err)
	}
	addr := versionServer(t)
	path := filepath.Join(t.TempDir(), "ready")
	cfg := &serveConfig{readyFile: path, launch: "local"}
	stop := startReadiness(cfg, addr, nil, newLaunchKick(), witnessStates{pcap: stateDisabled, audit: stateDisabled, disk: m}, slog.New(slog.DiscardHandler))
	defer stop()
	for _, step := range []struct {
		free int64
		want string
	}{{500, "ok"}, {90, "low"}, {40, "critical"}, {200, "ok"}} {
		free.Store(step.free)
		m.Poll()
		if got := readinessValue(path, "disk"); got != step.want {
			t.Fatalf("free %d: readiness disk=%s, want %s", step.free, got, step.want)
		}
		if err := checkHealth(path, ""); err != nil {
			t.Fatalf("disk=%s: health fails: %v", step.want, err)
		}
		if line := healthLine(path); !strings.Contains(line, " disk="+step.want) || !strings.HasPrefix(line, "healthy ") {
			t.Errorf("health prints %q, want disk=%s", line, step.want)
		}
	}
}

// TestStartDiskLogsTransitions: serve logs the volume's state at start
// and every transition, with the free bytes and the marks and what the
// state does to the recording.
func TestStartDiskLogsTransitions(t *testing.T) {
	var free atomic.Int64
	free.Store(500)
	src := func() (diskstate.Usage, error) { return diskstate.Usage{Free: free.Load(), Size: 1000}, nil }
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	cfg := &serveConfig{disk: diskstate.Thresholds{LowPercent: 10, CriticalPercent: 5, ResumePercent: 15}}
	m, stop, err := startDisk(cfg, src, log)
	if err != nil {
		t.Fatal(err)
	}
	stop() // no poll of its own from here: the test's polls only
	for _, f := range []int64{90, 40, 200} {
		free.Store(f)
		m.Poll()
	}
	out := buf.String()
	for _, want := range []string{
		`level=INFO msg="capture volume" state=ok free_bytes=500 volume_bytes=1000 low_below=100 critical_below=50 resume_at=150`,
		`level=WARN msg="capture volume is low; the witnesses (pcap, audit) stop storing`,
		`from=ok state=low free_bytes=90`,
		`level=WARN msg="capture volume is critical; new sessions are refused`,
		`from=low state=critical free_bytes=40`,
		`level=INFO msg="capture volume is ok again;`,
		`from=critical state=ok free_bytes=200`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
