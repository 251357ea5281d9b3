// Package ratelog writes a repeated log line at a bounded rate without
// losing count: a flood of refusals (peers, connections, channel requests)
// must not become a log flood, and every event must still be in the log,
// as a line of its own or in a count.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Log writes at most burst lines per window. The events past the burst
// are counted, and one summary line reports the count when the window
// ends (a timer, so the count appears even if no event follows) or when
// Flush is called. The zero value is not usable; call New.
type Log struct {
	log     *slog.Logger
	level   slog.Level
	summary string // message of the count line
	burst   int
	window  time.Duration

	mu         sync.Mutex // guards the fields below
	start      time.Time  // of the current window
	logged     int        // lines written in the current window
	suppressed uint64     // events counted, not written, since the last report
	pending    *time.Timer
}

// New returns a Log writing to log at level; summary is the message of the
// line that reports the count of events not written one by one.
func New(log *slog.Logger, level slog.Level, summary string, burst int, window time.Duration) *Log {
	return &Log{log: log, level: level, summary: summary, burst: burst, window: window}
}

// SetLimits changes the burst and window (tests shorten or lengthen them).
func (r *Log) SetLimits(burst int, window time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.burst, r.window = burst, window
}

// Note records one event: a line with msg and attrs while the window's
// burst lasts, a count after that. attrs must hold no value a peer chose
// beyond numbers, fixed reasons and validated or escaped names.
func (r *Log) Note(msg string, attrs ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.start) >= r.window {
		r.reportLocked()
		r.start, r.logged = now, 0
	}
	if r.logged < r.burst {
		r.logged++
		r.log.Log(context.Background(), r.level, msg, attrs...)
		return
	}
	r.suppressed++
	if r.pending == nil {
		// One timer at most per window.
		r.pending = time.AfterFunc(r.start.Add(r.window).Sub(now), r.Flush)
	}
}

// Flush reports the events counted so far: at the window's end, and by
// the owner when the stream of events ends (shutdown, session end).
func (r *Log) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reportLocked()
}

func (r *Log) reportLocked() {
	if r.pending != nil {
		r.pending.Stop()
		r.pending = nil
	}
	if r.suppressed == 0 {
		return
	}
	r.log.Log(context.Background(), r.level, r.summary, "count", r.suppressed,
		"window", r.window.String(), "logged_per_window", r.burst)
	r.suppressed = 0
}
