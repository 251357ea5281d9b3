package webplayer

import (
	"fmt"
	"math"
	"time"
)

// timelineHeight is the SVG's height in its own units: output bars grow
// up from the middle, input bars down.
const timelineHeight = 100

// timeline is the bytes-per-second chart, drawn in Go so that it is there
// with JavaScript off.
type timeline struct {
	Bars       []timelineBar
	Columns    int
	BucketSecs int64
	MaxOut     int64
	MaxIn      int64
	TotalSecs  string
	Middle     int
}

// timelineBar is one column's two bars, in SVG units.
type timelineBar struct {
	X              int
	OutY, OutH     float64
	InH            float64
	Label          string
	HasOut, HasInp bool
}

// timeline buckets the data entries by second (or by several seconds past
// MaxTimelineBars of them) and scales each stream to its own largest
// bucket on a logarithmic scale, so that a few typed bytes show beside
// megabytes of output.
func (rec *recordScan) timeline() timeline {
	secs := int64(rec.duration/time.Second) + 1
	bucket := max((secs+MaxTimelineBars-1)/MaxTimelineBars, 1)
	cols := int((secs + bucket - 1) / bucket)
	in, out := make([]int64, cols), make([]int64, cols)
	for _, e := range rec.entries {
		i := min(int(int64(e.at/time.Second)/bucket), cols-1)
		if e.input {
			in[i] += e.n
		} else {
			out[i] += e.n
		}
	}
	tl := timeline{Columns: cols, BucketSecs: bucket, Middle: timelineHeight / 2,
		TotalSecs: fmt.Sprintf("%.1f", rec.duration.Seconds())}
	for i := range cols {
		tl.MaxIn, tl.MaxOut = max(tl.MaxIn, in[i]), max(tl.MaxOut, out[i])
	}
	half := float64(timelineHeight/2 - 1)
	scale := func(n, top int64) float64 {
		if n == 0 || top == 0 {
			return 0
		}
		return max(half*math.Log1p(float64(n))/math.Log1p(float64(top)), 1)
	}
	for i := range cols {
		if in[i] == 0 && out[i] == 0 {
			continue
		}
		oh := scale(out[i], tl.MaxOut)
		tl.Bars = append(tl.Bars, timelineBar{X: i, OutY: float64(tl.Middle) - oh, OutH: oh, InH: scale(in[i], tl.MaxIn),
			HasOut: out[i] > 0, HasInp: in[i] > 0,
			Label: fmt.Sprintf("%ds-%ds: %d bytes out, %d bytes in", int64(i)*bucket, int64(i+1)*bucket, out[i], in[i])})
	}
	return tl
}
