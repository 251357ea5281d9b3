package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHarnessSmoke runs one tiny round against the three real targets and
// checks that the table has every row with a value for each target. It
// asserts nothing about the figures: speed is the benchmark's to report.
func TestHarnessSmoke(t *testing.T) {
	if os.Getenv("APTL_CAPTURE_SLOW_TESTS") != "1" {
		t.Skip("starts sshd twice and the server: set APTL_CAPTURE_SLOW_TESTS=1")
	}
	if os.Geteuid() != 0 {
		t.Skip("the benchmark runs as root (sshd, useradd)")
	}
	opt := FullOptions()
	if _, err := exec.LookPath(opt.SSHD); err != nil {
		t.Skip("needs sshd: apt-get install openssh-server")
	}
	modules := os.Getenv("APTL_SSH2_NODE_MODULES")
	if modules == "" {
		modules = filepath.Join("..", "tests", "node", "node_modules")
	}
	if _, err := os.Stat(filepath.Join(modules, "ssh2")); err != nil {
		t.Skipf("needs node ssh2: set APTL_SSH2_NODE_MODULES (%v)", err)
	}
	opt.Repo, opt.NodeModules, opt.User = "..", modules, "aptlbenchsmoke"
	opt.Rounds, opt.GoOpens, opt.SSH2Opens, opt.RoundTrips = 1, 1, 2, 3
	opt.PTYBytes, opt.ExecBytes, opt.Sessions, opt.Conns, opt.Commands = 64<<10, 1<<20, 4, 2, 2
	var progress bytes.Buffer
	opt.Progress = &progress
	res, err := Run(opt)
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	var table bytes.Buffer
	res.WriteTable(&table, opt.Rounds)
	t.Logf("\n%s", table.String())
	for _, rw := range rows {
		if !strings.Contains(table.String(), "| "+rw.label+" |") {
			t.Errorf("table has no row %q", rw.label)
		}
	}
	for _, target := range []string{"A", "B", "us"} {
		for _, v := range valueOrder {
			if v == "mem" {
				continue // a difference of two readings: may be zero or negative (said so, TestNegativeIsSaidSo)
			}
			if res.Median(target, v) <= 0 {
				t.Errorf("%s: %s = %v, want a measured value", target, v, res.Median(target, v))
			}
		}
	}
	if _, err := exec.Command("id", opt.User).Output(); err == nil {
		t.Errorf("the login user %s made for the run is still there", opt.User)
	}
}

// TestRatiosArePerRound: a round where every target was slow (a busy
// minute) moves the medians of A and us apart but not the ratio, which is
// taken within each round.
func TestRatiosArePerRound(t *testing.T) {
	res := newResults()
	for _, round := range []struct{ a, us float64 }{{1, 2}, {10, 20}, {1.5, 3}} {
		res.add("A", map[string]float64{"rt": round.a})
		res.add("B", map[string]float64{"rt": round.a})
		res.add("us", map[string]float64{"rt": round.us})
	}
	if got := res.RatioMedian("us", "A", "rt"); got != 2 {
		t.Errorf("ratio median = %v, want 2", got)
	}
	if got := res.Median("A", "rt"); got != 1.5 {
		t.Errorf("median of A = %v, want 1.5", got)
	}
	var table bytes.Buffer
	res.WriteTable(&table, 3)
	want := "| round trip, delimiter-wrapped `true` (ms, p50) | 1.50 | 1.50 | 3.00 | 2.00 | 1.00 | ≤ 1.05 | no |"
	if !strings.Contains(table.String(), want) {
		t.Errorf("table lacks\n%s\ngot:\n%s", want, table.String())
	}
	if strings.Contains(table.String(), "bulk exec") {
		t.Errorf("a figure that was not measured has a row:\n%s", table.String())
	}
}

// TestNegativeIsSaidSo: a memory figure below zero (a difference of two
// readings) is marked in the table, the goal is not judged on it, and the
// note names the target, round and value; a progress line says so too.
func TestNegativeIsSaidSo(t *testing.T) {
	res := newResults()
	for _, mem := range [][3]float64{{320, 480, 25}, {318, 490, -18.9}, {322, 470, 30}} {
		res.add("A", map[string]float64{"mem": mem[0]})
		res.add("B", map[string]float64{"mem": mem[1]})
		res.add("us", map[string]float64{"mem": mem[2]})
	}
	var table bytes.Buffer
	res.WriteTable(&table, 3)
	for _, want := range []string{
		"| memory per session (PSS, KiB) | 320 | 480 | 25.0 * | 0.08 * | 1.50 | < 256 KiB absolute | not judged * |",
		"* memory per session (PSS, KiB), us: mem in round 2: -18.9 (negative: ",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks\n%s\ngot:\n%s", want, table.String())
		}
	}
	if strings.Contains(table.String(), ", A: ") || strings.Contains(table.String(), ", B: ") {
		t.Errorf("a note for a target with no negative round:\n%s", table.String())
	}
	if got := formatValues(map[string]float64{"mem": -18.9}); !strings.Contains(got, "mem=-18.9 (negative: ") {
		t.Errorf("progress line %q does not say the value is negative", got)
	}
}
