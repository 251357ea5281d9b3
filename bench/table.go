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

// Median is the median over the rounds of one target's value.
func (r *Results) Median(target, value string) float64 {
	v := slices.Clone(r.values[target][value])
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
	met    func(us, a []float64) bool
}

func ratioAtMost(limit float64) func(us, a []float64) bool {
	return func(us, a []float64) bool {
		for i := range us {
			if us[i]/a[i] > limit {
				return false
			}
		}
		return true
	}
}

func ratioAtLeast(limit float64) func(us, a []float64) bool {
	return func(us, a []float64) bool {
		for i := range us {
			if us[i]/a[i] < limit {
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
		func(us, a []float64) bool { return us[0]/a[0] >= 1.0 && us[1]/a[1] <= 1.0 }},
	{"memory per session (PSS, KiB)", []string{"mem"}, "< 256 KiB absolute",
		func(us, _ []float64) bool { return us[0] < 256 }},
}

// WriteTable writes the Markdown table of medians: A, B, us, the ratios
// us/A and B/A, the goal and whether the medians meet it.
func (r *Results) WriteTable(w io.Writer, rounds int) {
	fmt.Fprintf(w, "| figure (medians of %d rounds) | A: sshd | B: sshd + script | us | us/A | B/A | goal for us/A | met |\n", rounds)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, rw := range rows {
		col := func(target string) []float64 {
			var out []float64
			for _, k := range rw.values {
				out = append(out, r.Median(target, k))
			}
			return out
		}
		a, b, us := col("A"), col("B"), col("us")
		if _, measured := r.values["us"][rw.values[0]]; !measured {
			continue // not in this run's -only
		}
		met := "no"
		if rw.met(us, a) {
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", rw.label,
			join(a, num), join(b, num), join(us, num), ratios(us, a), ratios(b, a), rw.goal, met)
	}
}

func ratios(x, a []float64) string {
	var parts []string
	for i := range x {
		if a[i] == 0 {
			parts = append(parts, "–")
			continue
		}
		parts = append(parts, fmt.Sprintf("%.2f", x[i]/a[i]))
	}
	return strings.Join(parts, " / ")
}

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
