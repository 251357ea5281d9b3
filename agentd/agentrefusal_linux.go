package agentd

import (
	"log/slog"
	"sync"
	"time"
)

// Defaults of the agent's refusal log: a flood of refused peers (tens of
// thousands a second) must not turn into as many log writes, which would
// cost the agent more than the refusals themselves.
const (
	refusalLogBurst  = 20          // refusals logged in full per window
	refusalLogWindow = time.Second // after which the count of the rest is logged
)

// refusalLog logs refused connections, at most burst lines per window. The
// refusals past the burst are counted, and one line reports the count when
// the window ends, so every refusal is in the log, as a line or in a count.
type refusalLog struct {
	log    *slog.Logger
	burst  int
	window time.Duration

	mu         sync.Mutex // guards the fields below
	start      time.Time  // of the current window
	logged     int        // lines written in the current window
	suppressed uint64     // refusals counted, not written, since the last report
	pending    *time.Timer
}

func newRefusalLog(log *slog.Logger) *refusalLog {
	return &refusalLog{log: log, burst: refusalLogBurst, window: refusalLogWindow}
}

// refuse records one refusal: a Warn line with msg and attrs while the
// window's burst lasts, a count after that. attrs must hold no values the
// peer chose beyond numbers and fixed reasons.
func (r *refusalLog) refuse(msg string, attrs ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.start) >= r.window {
		r.reportLocked()
		r.start, r.logged = now, 0
	}
	if r.logged < r.burst {
		r.logged++
		r.log.Warn(msg, attrs...)
		return
	}
	r.suppressed++
	if r.pending == nil {
		// One timer at most: the count is reported when the window ends
		// even if no refusal follows.
		r.pending = time.AfterFunc(r.start.Add(r.window).Sub(now), r.flush)
	}
}

// flush reports the refusals counted so far (the window's end, Shutdown).
func (r *refusalLog) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reportLocked()
}

func (r *refusalLog) reportLocked() {
	if r.pending != nil {
		r.pending.Stop()
		r.pending = nil
	}
	if r.suppressed == 0 {
		return
	}
	r.log.Warn("connection refusals not logged one by one", "count", r.suppressed,
		"window", r.window.String(), "logged_per_window", r.burst)
	r.suppressed = 0
}
