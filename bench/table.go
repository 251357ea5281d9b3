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

// negativeMeaning says what a negative value means, for the values that
// are differences of two readings and so can come out below zero. A
// negative value is never printed without it.
var negativeMeaning = map[string]string{
	"mem": "the server's PSS was lower with the sessions open than before them: the readings moved, not the sessions' cost",
}

// negativeNote is what follows a negative value of k.
func negativeNote(k string) string {
	if m, ok := negativeMeaning[k]; ok {
		return "negative: " + m
	}
	return "negative"
}

// WriteTable writes the Markdown table: the medians of A, B and us, the
// medians of the per-round ratios us/A and B/A, the goal and whether it is
// met (ratio goals on the ratios, absolute goals on us's median). A value
// that was negative in any round is marked "*" (with the ratios it enters
// and the goal left unjudged when us's is), and a note under the table
// names the rounds.
func (r *Results) WriteTable(w io.Writer, rounds int) {
	fmt.Fprintf(w, "| figure (medians of %d rounds) | A: sshd | B: sshd + script | us | us/A | B/A | goal for us/A | met |\n", rounds)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	var notes []string
	for _, rw := range rows {
		if _, measured := r.values["us"][rw.values[0]]; !measured {
			continue // not in this run's -only
		}
		var a, b, us, usA, bA []string
		var usMedians, usRatios []float64
		usNegative := false
		for _, k := range rw.values {
			negA, negB, negUs := r.negativeRounds("A", k), r.negativeRounds("B", k), r.negativeRounds("us", k)
			for _, n := range []struct {
				target string
				rounds []string
			}{{"A", negA}, {"B", negB}, {"us", negUs}} {
				if len(n.rounds) > 0 {
					notes = append(notes, fmt.Sprintf("* %s, %s: %s in round %s (%s).",
						rw.label, n.target, k, strings.Join(n.rounds, ", round "), negativeNote(k)))
				}
			}
			usMedians, usRatios = append(usMedians, r.Median("us", k)), append(usRatios, r.RatioMedian("us", "A", k))
			a = append(a, marked(num(r.Median("A", k)), negA))
			b = append(b, marked(num(r.Median("B", k)), negB))
			us = append(us, marked(num(r.Median("us", k)), negUs))
			usA = append(usA, marked(ratio(r.RatioMedian("us", "A", k)), negUs, negA))
			bA = append(bA, marked(ratio(r.RatioMedian("B", "A", k)), negB, negA))
			usNegative = usNegative || len(negUs) > 0
		}
		met := "no"
		switch {
		case usNegative:
			met = "not judged *"
		case rw.met(usMedians, usRatios):
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", rw.label,
			strings.Join(a, " / "), strings.Join(b, " / "), strings.Join(us, " / "),
			strings.Join(usA, " / "), strings.Join(bA, " / "), rw.goal, met)
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
		fmt.Fprintln(w, "The medians and ratios marked * include those rounds.")
	}
}

// negativeRounds lists the rounds (1-based, with the value) in which the
// target's value k was below zero.
func (r *Results) negativeRounds(target, k string) []string {
	var rounds []string
	for i, v := range r.values[target][k] {
		if v < 0 {
			rounds = append(rounds, fmt.Sprintf("%d: %s", i+1, num(v)))
		}
	}
	return rounds
}

// marked is cell with " *" when any of negatives is not empty.
func marked(cell string, negatives ...[]string) string {
	for _, n := range negatives {
		if len(n) > 0 {
			return cell + " *"
		}
	}
	return cell
}

func ratio(v float64) string { return fmt.Sprintf("%.2f", v) }

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
