// Package ship sends each session's evidence to S3-compatible object
// storage while the session runs (docs/OPERATING.md, "Shipping"): at every
// signed checkpoint the segments of the session's files that the
// checkpoint covers, each an object of its own uploaded with the SHA-256
// of exactly its bytes, which the store checks on arrival, and each
// acknowledgement recorded in the session's chain (a shipped record), so
// the chain says what left the box and the bucket's checksum what arrived;
// once the session is sealed, each file whole. The local copy stays
// authoritative: nothing is read from anywhere else, nothing is deleted,
// a failed request is retried until it succeeds, and what a stop leaves
// unshipped the next start ships (resume.go), completing what a crash
// left half uploaded. The shipper's state (ok, behind, failing) and its
// lag go to the readiness file.
package ship

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// State is the shipper's health for readiness.
type State string

const (
	// StateOK: every checkpoint is in the bucket within BehindAfter.
	StateOK State = "ok"
	// StateBehind: a backlog, or requests failing the way outages fail
	// (no answer, 5xx, throttling); it drains when the store is back.
	StateBehind State = "behind"
	// StateFailing: the store refuses the requests (access denied, no
	// such bucket, a digest it will not confirm): retried, but an
	// operator must act.
	StateFailing State = "failing"
)

// BehindAfter is the lag from a checkpoint to its acknowledgement past
// which the shipper is behind.
const BehindAfter = 5 * time.Second

// Status is the shipper's state and its lag: the age of the oldest
// checkpoint not yet acknowledged, and the bytes of the sessions' record
// files not yet acknowledged.
type Status struct {
	State     State
	Lag       time.Duration
	LagBytes  int64
	LastError string
}

// Shipper ships every open session's stream with a bounded set of
// workers, each stream by one worker at a time.
type Shipper struct {
	st      *store
	log     *slog.Logger
	started time.Time // uploads begun before are an earlier run's

	ctx    context.Context // cancelled when Close gives up waiting
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	wake     *sync.Cond
	queue    []*Stream
	streams  map[string]*Stream // by run/session: open streams and their ends
	busy     int
	closing  bool
	failures int // consecutive failed requests
	refusing bool
	lastErr  string

	// once makes each request once, its error returned (verify
	// --shipped: an examiner's command reports an outage, it does not
	// wait it out).
	once bool
	// testHook, when set, runs before each request (tests: a crash
	// mid-upload).
	testHook func(op, key string) error
}

// New connects to the store of cfg and starts the workers. It fails on a
// setting that is wrong or no credentials; it does not reach the store,
// which may be down at start like at any time.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Shipper, error) {
	st, err := newStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return newShipper(st, log), nil
}

func newShipper(st *store, log *slog.Logger) *Shipper {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Shipper{st: st, log: log, started: st.now(), ctx: ctx, cancel: cancel, streams: map[string]*Stream{}}
	s.wake = sync.NewCond(&s.mu)
	workers := st.cfg.Workers
	if workers == 0 {
		workers = DefaultWorkers
	}
	for range workers {
		s.wg.Go(s.work)
	}
	return s
}

// work ships queued streams until Close.
func (s *Shipper) work() {
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closing {
			s.wake.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		st := s.queue[0]
		s.queue = s.queue[1:]
		s.busy++
		s.mu.Unlock()

		again := st.round(s.ctx)

		s.mu.Lock()
		s.busy--
		if again && s.ctx.Err() == nil {
			s.queue = append(s.queue, st)
		}
		s.wake.Broadcast()
		s.mu.Unlock()
	}
}

// enqueue puts st in the queue. Callers hold st.mu; st is queued at most
// once at a time.
func (s *Shipper) enqueue(st *Stream) {
	s.mu.Lock()
	s.queue = append(s.queue, st)
	s.wake.Signal()
	s.mu.Unlock()
}

// Close stops taking work and waits until every stream's queued work is
// shipped, or ctx ends: then the requests in flight are cancelled, and
// what is left is the next start's to ship.
func (s *Shipper) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.wake.Broadcast()
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.cancel()
		return nil
	case <-ctx.Done():
		s.cancel()
		<-done
		return fmt.Errorf("ship: stopped with work left for the next start: %w", ctx.Err())
	}
}

// Status reports the shipper's state and lag now.
func (s *Shipper) Status() Status {
	now := s.st.now()
	s.mu.Lock()
	streams := make([]*Stream, 0, len(s.streams))
	for _, st := range s.streams {
		streams = append(streams, st)
	}
	out := Status{LastError: s.lastErr}
	failing, refusing := s.failures > 0, s.refusing
	s.mu.Unlock()
	for _, st := range streams {
		since, bytes := st.lag()
		if !since.IsZero() && now.Sub(since) > out.Lag {
			out.Lag = now.Sub(since)
		}
		out.LagBytes += bytes
	}
	switch {
	case refusing:
		out.State = StateFailing
	case failing || out.Lag > BehindAfter:
		out.State = StateBehind
	default:
		out.State = StateOK
	}
	return out
}

// retry runs req until it succeeds or ctx ends, backing off between
// attempts, and keeps the shipper's state: each failure is counted and
// logged (the first of a run of them, then every 20th), a success ends
// the run. An upload the store no longer has (NoSuchUpload: aborted by a
// lifecycle rule, an operator, or completed already) is final: the
// caller decides. The log is written outside the lock, which a
// recorder's Point takes through enqueue: a slow log sink never holds up
// a session's recording.
func (s *Shipper) retry(ctx context.Context, op, key string, req func(context.Context) error) error {
	for n := 0; ; n++ {
		err := s.attempt(ctx, op, key, req)
		if s.once || isCode(err, codeNoSuchUpload) {
			return err
		}
		if err == nil {
			s.mu.Lock()
			ended := s.failures
			s.failures, s.refusing, s.lastErr = 0, false, ""
			s.mu.Unlock()
			if ended > 0 {
				s.log.Info("ship: the store answers again", "failed_requests", ended)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		msg, isRefusal := describe(err), refused(err)
		s.mu.Lock()
		s.failures++
		s.refusing, s.lastErr = isRefusal, msg
		failures := s.failures
		s.mu.Unlock()
		if failures == 1 || failures%20 == 0 {
			s.log.Warn("ship: request failed; retrying, the local copy is kept", "op", op, "key", key, "refused", isRefusal, "failed_requests", failures, "err", msg)
		}
		select {
		case <-time.After(backoff(n)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Shipper) attempt(ctx context.Context, op, key string, req func(context.Context) error) error {
	if s.testHook != nil {
		if err := s.testHook(op, key); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return req(ctx)
}
