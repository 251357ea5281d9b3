package audit

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// BenchmarkExecRate measures how many execs a second a session process
// sustains with the witness recording every one (the lab's exec rule and
// the witness's exit_group rule), against the same loop with no witness,
// in the same run, and states whether any record was lost. One iteration
// is one session process running benchExecs execs of /bin/true:
//
//	APTL_CAPTURE_SLOW_TESTS=1 go test -run '^$' -bench ExecRate -benchtime 1x -count 5 ./witness/audit/
//
// execs/s is the loop's rate; events/exec the events the session's file
// got per exec (2: the exec and the exit); lost the kernel's lost counter's
// rise plus the multicast overruns during the iteration.
func BenchmarkExecRate(b *testing.B) {
	const benchExecs = 500
	script := fmt.Sprintf("for i in $(seq %d); do /bin/true; done", benchExecs)
	b.Run("without-witness", func(b *testing.B) {
		requireAuditBench(b)
		for b.Loop() {
			_, wait, took := timedSession(b, script)
			wait()
			b.ReportMetric(benchExecs/took().Seconds(), "execs/s")
		}
	})
	b.Run("witness", func(b *testing.B) {
		requireAuditBench(b)
		rs, err := ParseRules(strings.NewReader("-a always,exit -F arch=b64 -S execve -k aptl_exec\n"), "bench.rules")
		if err != nil {
			b.Fatal(err)
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		eng, err := Start(Config{Root: b.TempDir(), Rules: rs, Limits: Limits{RotateBytes: 1 << 30, Files: 2}, Log: log})
		if err != nil {
			b.Fatal(err)
		}
		defer eng.Close()
		for b.Loop() {
			files := newFileSet(Limits{RotateBytes: 1 << 30, Files: 1}, func(string) (*os.File, error) { return os.CreateTemp(b.TempDir(), "bench") }, nil)
			w := &witness{eng: eng, notify: func() {}, ses: unsetID, files: files}
			w.Start()
			before := eng.Stats()
			ses, wait, took := timedSession(b, script)
			w.BindAuditSession(ses, "")
			wait()
			rate := benchExecs / took().Seconds()
			eng.detach(w, ses, time.Now().Add(eventLinger))
			after := eng.Stats()
			w.mu.Lock()
			events := w.events
			w.mu.Unlock()
			b.ReportMetric(rate, "execs/s")
			b.ReportMetric(float64(events)/benchExecs, "events/exec")
			b.ReportMetric(float64(after.Lost-before.Lost+after.Overruns-before.Overruns), "lost")
		}
	})
}

func requireAuditBench(b *testing.B) {
	b.Helper()
	if os.Getenv("APTL_CAPTURE_SLOW_TESTS") != "1" || os.Geteuid() != 0 {
		b.Skip("loads audit rules into the kernel: root and APTL_CAPTURE_SLOW_TESTS=1 only")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		b.Skip("needs unshare (Debian util-linux)")
	}
	c, err := openControl()
	if err != nil {
		b.Skipf("the kernel's audit netlink is not available: %v", err)
	}
	st, _ := c.status()
	c.Close()
	if st.Enabled == 0 {
		b.Cleanup(func() {
			if c, err := openControl(); err == nil {
				c.set(statusEnabled, 0, 0)
				c.Close()
			}
		})
	}
}

// timedSession runs script as a session process (loginuid set) that waits
// for a go file before its loop, so the ses can be bound first; took is
// the loop's duration as the process measured it.
func timedSession(b *testing.B, script string) (ses uint32, wait func(), took func() time.Duration) {
	b.Helper()
	dir := b.TempDir()
	full := fmt.Sprintf(`while [ ! -e %[1]s/go ]; do sleep 0.01; done; s=$(date +%%s%%N); %[2]s; e=$(date +%%s%%N); echo $((e-s)) > %[1]s/took`, dir, script)
	ses, waitProc := sessionProcess(b, 4242, full)
	if err := os.WriteFile(dir+"/go", nil, 0o600); err != nil {
		b.Fatal(err)
	}
	return ses, waitProc, func() time.Duration {
		raw, err := os.ReadFile(dir + "/took")
		var ns int64
		if err == nil {
			_, err = fmt.Sscan(string(raw), &ns)
		}
		if err != nil || ns <= 0 {
			b.Fatalf("the loop's duration: %q %v", raw, err)
		}
		return time.Duration(ns)
	}
}
