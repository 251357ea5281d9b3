package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Results are every round's values, per target and value name.
type Results struct {
	values map[string]map[string][]float64 // target -> value -> rounds
}

func newResults() *Results { return &Results{values: map[string]map[string][]float64{}} }

func (r *Results) add(target string, vals map[string]float64) {
	if r.values[target] == nil {
		r.values[target] = map[string][]float64{}
	}
	for k, v := range vals {
		r.values[target][k] = append(r.values[target][k], v)
	}
}

// RatioMedian is the median over the rounds of x's value divided by a's in
// the same round. On a shared machine the load changes from minute to
// minute; a round measures the three targets within the same minute, so
// its ratio is steadier than the ratio of the medians.
func (r *Results) RatioMedian(x, a, value string) float64 {
	xs, as := r.values[x][value], r.values[a][value]
	var ratios []float64
	for i := range min(len(xs), len(as)) {
		if as[i] != 0 {
			ratios = append(ratios, xs[i]/as[i])
		}
	}
	return median(ratios)
}

// Median is the median over the rounds of one target's value.
func (r *Results) Median(target, value string) float64 {
	return median(r.values[target][value])
}

func median(values []float64) float64 {
	v := slices.Clone(values)
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// valueOrder is every value a round yields, in table order.
var valueOrder = []string{"go_open", "ssh2_open_p50", "ssh2_open_p90", "ssh2_phase", "rt",
	"pty_zeros", "pty_lines", "exec", "conc_cps", "conc_p99", "mem"}

// row is a line of the table: one or two values, and the goal from
// issue 14 with its test on the medians of us and A.
type row struct {
	label  string
	values []string
	goal   string
	met    func(us, usOverA []float64) bool // medians of us, per-round ratios
}

func ratioAtMost(limit float64) func(us, usOverA []float64) bool {
	return func(_, ratio []float64) bool {
		for i := range ratio {
			if ratio[i] > limit {
				return false
			}
		}
		return true
	}
}

func ratioAtLeast(limit float64) func(us, usOverA []float64) bool {
	return func(_, ratio []float64) bool {
		for i := range ratio {
			if ratio[i] < limit {
				return false
			}
		}
		return true
	}
}

var rows = []row{
	{"session open, Go client (ms, p50)", []string{"go_open"}, "≤ 0.5", ratioAtMost(0.5)},
	{"session open, node ssh2 (ms, p50 / p90)", []string{"ssh2_open_p50", "ssh2_open_p90"}, "p90 < 100 ms",
		func(us, _ []float64) bool { return us[1] < 100 }},
	{"of which env+pty+shell phase, node ssh2 (ms, p50)", []string{"ssh2_phase"}, "≤ 1.0", ratioAtMost(1.0)},
	{"round trip, delimiter-wrapped `true` (ms, p50)", []string{"rt"}, "≤ 1.05", ratioAtMost(1.05)},
	{"bulk PTY output, zeros / lines (MB/s)", []string{"pty_zeros", "pty_lines"}, "≥ 1.0", ratioAtLeast(1.0)},
	{"bulk exec output, no PTY (MB/s)", []string{"exec"}, "≥ 0.8", ratioAtLeast(0.8)},
	{"64 concurrent sessions: commands/s, p99 (ms)", []string{"conc_cps", "conc_p99"}, "≥ 1.0, ≤ 1.0",
		func(_, ratio []float64) bool { return ratio[0] >= 1.0 && ratio[1] <= 1.0 }},
	{"memory per session (PSS, KiB)", []string{"mem"}, "< 256 KiB absolute",
		func(us, _ []float64) bool { return us[0] < 256 }},
}

// WriteTable writes the Markdown table: the medians of A, B and us, the
// medians of the per-round ratios us/A and B/A, the goal and whether it is
// met (ratio goals on the ratios, absolute goals on us's median).
func (r *Results) WriteTable(w io.Writer, rounds int) {
	fmt.Fprintf(w, "| figure (medians of %d rounds) | A: sshd | B: sshd + script | us | us/A | B/A | goal for us/A | met |\n", rounds)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, rw := range rows {
		if _, measured := r.values["us"][rw.values[0]]; !measured {
			continue // not in this run's -only
		}
		var a, b, us, usA, bA []float64
		for _, k := range rw.values {
			a, b, us = append(a, r.Median("A", k)), append(b, r.Median("B", k)), append(us, r.Median("us", k))
			usA, bA = append(usA, r.RatioMedian("us", "A", k)), append(bA, r.RatioMedian("B", "A", k))
		}
		met := "no"
		if rw.met(us, usA) {
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", rw.label,
			join(a, num), join(b, num), join(us, num), join(usA, ratio), join(bA, ratio), rw.goal, met)
	}
}

func ratio(v float64) string { return fmt.Sprintf("%.2f", v) }

func join(v []float64, f func(float64) string) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = f(x)
	}
	return strings.Join(parts, " / ")
}

// num prints three significant digits at most.
func num(v float64) string {
	switch a := max(v, -v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
