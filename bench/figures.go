package bench

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// A figure measures one target once per round and returns named values;
// the table takes each value's median over the rounds.
type figure struct {
	id      string // for -only
	name    string
	measure func(r *runner, t *target, round int) (map[string]float64, error)
}

var figures = []figure{
	{"open", "session open, Go client", (*runner).goOpen},
	{"ssh2", "session open, node ssh2", (*runner).ssh2Open},
	{"rt", "round trip", (*runner).roundTrip},
	{"pty", "bulk PTY output", (*runner).bulkPTY},
	{"exec", "bulk exec output", (*runner).bulkExec},
	{"concurrent", "64 concurrent sessions and memory", (*runner).concurrent},
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile of values (nearest rank); values is sorted in place.
func percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return 0
	}
	slices.Sort(values)
	i := int(float64(len(values))*p/100+0.5) - 1
	return values[max(0, min(i, len(values)-1))]
}

// goOpen: from the TCP connect to the end marker of the first
// delimiter-wrapped `true` in a fresh PTY shell (connect, key exchange,
// authentication, channel, env, pty-req, shell, bash's start), one open
// after the other; the value is the median.
func (r *runner) goOpen(t *target, round int) (map[string]float64, error) {
	var lat []float64
	for i := range r.opt.GoOpens {
		start := time.Now()
		c, err := dial(t, r.acct.name, r.key)
		if err != nil {
			return nil, err
		}
		err = withTimeout(c, func() error {
			sh, err := openShell(c, fmt.Sprintf("bench-go-%d-%d", round, i))
			if err != nil {
				return err
			}
			if _, err := sh.run(); err != nil {
				return err
			}
			lat = append(lat, ms(time.Since(start)))
			sh.close()
			return nil
		})
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("open %d: %w", i, err)
		}
	}
	return map[string]float64{"go_open": percentile(lat, 50)}, nil
}

// roundTrip: one persistent PTY shell, RoundTrips delimiter-wrapped `true`
// commands one after the other after five unmeasured ones; the median.
func (r *runner) roundTrip(t *target, round int) (map[string]float64, error) {
	c, err := dial(t, r.acct.name, r.key)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var lat []float64
	err = withTimeout(c, func() error {
		sh, err := openShell(c, fmt.Sprintf("bench-rt-%d", round))
		if err != nil {
			return err
		}
		defer sh.close()
		for i := range 5 + r.opt.RoundTrips {
			d, err := sh.run()
			if err != nil {
				return err
			}
			if i >= 5 {
				lat = append(lat, ms(d))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return map[string]float64{"rt": percentile(lat, 50)}, nil
}

// bulkPTY: a PTY exec session writing PTYBytes of zeros, then of text
// lines, as fast as the client reads; MB/s of the command's output (10^6
// bytes), from the exec request to the session's end.
func (r *runner) bulkPTY(t *target, _ int) (map[string]float64, error) {
	n := r.opt.PTYBytes
	zeros, err := r.bulk(t, fmt.Sprintf("head -c %d /dev/zero", n), n, true)
	if err != nil {
		return nil, fmt.Errorf("zeros: %w", err)
	}
	lines, err := r.bulk(t, fmt.Sprintf("yes 'aptl bench: a line of text 0123456789 abcdefghijklmnopqrstuvwxyz' | head -c %d", n), n, true)
	if err != nil {
		return nil, fmt.Errorf("lines: %w", err)
	}
	return map[string]float64{"pty_zeros": zeros, "pty_lines": lines}, nil
}

// bulkExec: an exec session without a PTY writing ExecBytes of zeros.
func (r *runner) bulkExec(t *target, _ int) (map[string]float64, error) {
	rate, err := r.bulk(t, fmt.Sprintf("head -c %d /dev/zero", r.opt.ExecBytes), r.opt.ExecBytes, false)
	return map[string]float64{"exec": rate}, err
}

func (r *runner) bulk(t *target, command string, size int64, pty bool) (float64, error) {
	c, err := dial(t, r.acct.name, r.key)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var rate float64
	err = withTimeout(c, func() error {
		sess, err := c.NewSession()
		if err != nil {
			return err
		}
		defer sess.Close()
		if pty {
			if err := sess.RequestPty("xterm", 24, 80, nil); err != nil {
				return err
			}
		}
		out, err := sess.StdoutPipe()
		if err != nil {
			return err
		}
		var got countWriter
		start := time.Now()
		if err := sess.Start(command); err != nil {
			return err
		}
		if _, err := io.CopyBuffer(&got, out, make([]byte, 64<<10)); err != nil {
			return err
		}
		if err := sess.Wait(); err != nil {
			return err
		}
		elapsed := time.Since(start)
		if int64(got) < size {
			return fmt.Errorf("received %d bytes of %d", got, size)
		}
		rate = float64(size) / 1e6 / elapsed.Seconds()
		return nil
	})
	return rate, err
}

// concurrent: Sessions PTY shells on Conns connections (the tool servers
// pool sessions on a few connections), all open; then each runs Commands
// delimiter-wrapped `true` one after the other, all shells at once:
// commands per second of wall time and the p99 of their round trips. Then,
// with every shell idle, the server side's memory per session: PSS of the
// server and its processes outside the login shells (memory.go), minus the
// same before the connections, divided by Sessions; each of the two a
// settled reading (settledPSS).
//
// The "before" is read on a target just restarted that has served one
// warm-up session (one command, closed). A Go server keeps what its heap
// has grown to after the sessions that grew it are gone, and the
// collector may or may not have run between two readings: on a server
// that has already held sessions (an earlier round or figure) the new
// sessions reuse that memory, and the difference was anything from a few
// KiB to below zero. A fresh process starts every reading from the same
// state; the warm-up session pages in the session path's code and sets up
// what a first session sets up once, which is not a cost per session.
// Warming up with the whole set instead would put what such a set grows
// the heap by, and the heap keeps, into the "before" (docs/BENCHMARKS.md
// has the numbers). sshd keeps nothing of closed connections; every target
// gets the same treatment.
func (r *runner) concurrent(t *target, round int) (map[string]float64, error) {
	if err := t.restart(); err != nil {
		return nil, fmt.Errorf("restart for a fresh memory reading: %w", err)
	}
	warm, err := r.openSessions(t, fmt.Sprintf("bench-warm-%d", round), 1, 1)
	if err == nil {
		_, err = runAll(warm.shells, 1)
	}
	warm.close()
	if err != nil {
		return nil, fmt.Errorf("warm-up session: %w", err)
	}
	pid := t.cmd.Process.Pid
	before, err := settledPSS(pid)
	if err != nil {
		return nil, fmt.Errorf("memory before the sessions: %w", err)
	}
	set, err := r.openSessions(t, fmt.Sprintf("bench-conc-%d", round), r.opt.Sessions, r.opt.Conns)
	defer set.close()
	if err != nil {
		return nil, err
	}
	// Every shell has started and printed its prompt before the clock
	// starts: one unmeasured command each.
	if _, err := runAll(set.shells, 1); err != nil {
		return nil, err
	}
	start := time.Now()
	lat, err := runAll(set.shells, r.opt.Commands)
	if err != nil {
		return nil, err
	}
	wall := time.Since(start)
	time.Sleep(500 * time.Millisecond) // idle: output drained, buffers settled
	after, err := settledPSS(pid)
	if err != nil {
		return nil, fmt.Errorf("memory with the sessions open: %w", err)
	}
	return map[string]float64{
		"conc_cps": float64(len(lat)) / wall.Seconds(),
		"conc_p99": percentile(lat, 99),
		"mem":      float64(after-before) / float64(len(set.shells)),
	}, nil
}

// sessionSet is PTY shells on connections to one target.
type sessionSet struct {
	clients []*gossh.Client
	shells  []*shell
}

// openSessions opens conns connections with sessions/conns shells each,
// session ids prefix-<connection>-<session>. On an error the set holds
// what was opened, for close.
func (r *runner) openSessions(t *target, prefix string, sessions, conns int) (*sessionSet, error) {
	set := &sessionSet{clients: make([]*gossh.Client, 0, conns), shells: make([]*shell, 0, sessions)}
	for i := range conns {
		c, err := dial(t, r.acct.name, r.key)
		if err != nil {
			return set, fmt.Errorf("connection %d: %w", i, err)
		}
		set.clients = append(set.clients, c)
		for j := range sessions / conns {
			sh, err := openShell(c, fmt.Sprintf("%s-%d-%d", prefix, i, j))
			if err != nil {
				return set, fmt.Errorf("connection %d session %d: %w", i, j, err)
			}
			set.shells = append(set.shells, sh)
		}
	}
	return set, nil
}

// close exits every shell, waiting (bounded) for each session's end, then
// closes the connections.
func (s *sessionSet) close() {
	var wg sync.WaitGroup
	for _, sh := range s.shells {
		wg.Go(sh.close)
	}
	wg.Wait()
	for _, c := range s.clients {
		c.Close()
	}
}

// runAll runs n commands on every shell, the shells in parallel, and
// returns every round trip in milliseconds.
func runAll(shells []*shell, n int) ([]float64, error) {
	var mu sync.Mutex
	var lat []float64
	var firstErr error
	var wg sync.WaitGroup
	timer := time.AfterFunc(opTimeout, func() {
		for _, sh := range shells {
			sh.sess.Close()
		}
	})
	defer timer.Stop()
	for _, sh := range shells {
		wg.Go(func() {
			for range n {
				d, err := sh.run()
				mu.Lock()
				if err == nil {
					lat = append(lat, ms(d))
				} else if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return lat, firstErr
}
