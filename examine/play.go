package examine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// PlayOptions are the choices of Play.
type PlayOptions struct {
	// Speed divides every delay: 1 is real time, 2 twice as fast. It must
	// be positive.
	Speed float64
	// MaxDelay caps one pause, as scriptreplay's --maxdelay (0: no cap).
	MaxDelay time.Duration
	// Input also plays the typed input (the I entries), in order with
	// the output: the typescript's body as recorded.
	Input bool
	// Follow keeps playing a session that is still being recorded, looking
	// at its growing files every Poll, until its close record appears
	// (or a restarted sidecar's recovery statement).
	Follow bool
	// Poll is how long Follow waits between two looks (DefaultPoll if 0).
	Poll time.Duration
	// IdleLimit stops Follow once the timing file has had no new entry
	// (nothing typed, printed or resized) for this long while Play
	// waited for one (0: no limit): Play then returns an *IdleError. A
	// session a crash left open gets no close record, and a follower
	// would otherwise wait for it for ever.
	IdleLimit time.Duration
	// Start fast-forwards: the entries recorded up to this offset into
	// the session (the sum of the timing file's delays, as recorded, at
	// any speed) are written at once, without their delays, so the
	// screen is what it was then; the rest are played with their timing.
	// The bytes written are the same as without it.
	Start time.Duration
	// Control, when not nil, steers the play while it runs: each
	// PlayAction received takes effect at once, even during a pause
	// between two entries.
	Control <-chan PlayAction
}

// DefaultPoll is how often Play --follow looks at a growing session.
const DefaultPoll = 50 * time.Millisecond

// Bounds of the play speed; PlayFaster and PlaySlower stop at them.
const (
	MinSpeed = 0.01
	MaxSpeed = 1e6
)

// PlayAction is what an examiner asks of a running play (PlayOptions.Control).
type PlayAction int

// The actions of a running play.
const (
	// PlayPause pauses the play, or resumes a paused one where it was.
	PlayPause PlayAction = iota + 1
	// PlayFaster doubles the speed, up to MaxSpeed; the pause under way
	// is shortened to match.
	PlayFaster
	// PlaySlower halves the speed, down to MinSpeed.
	PlaySlower
	// PlayStep, while paused, writes the next chunk the play shows (one
	// timing entry of a played stream) and stays paused; playing, it does
	// nothing.
	PlayStep
	// PlayQuit ends the play: Play returns nil.
	PlayQuit
)

// IdleError is Play --follow stopping at its idle limit.
type IdleError struct {
	Dir   string
	Limit time.Duration
}

func (e *IdleError) Error() string {
	return fmt.Sprintf("stopped following %s: nothing new was recorded for %v (the idle limit), and it has no close record yet", e.Dir, e.Limit)
}

// errQuit ends a play on PlayQuit.
var errQuit = errors.New("quit")

// Play writes the output of the session in dir to w with its timing, as
// `scriptreplay --log-io typescript --log-timing timing --stream out`
// does (the same bytes; scriptreplay adds one newline of its own at the
// end, Play does not): each O entry's bytes after the entry's delay, read
// from the typescript in timing order. With opts.Input the I entries are
// played too.
//
// The files are opened as the verifier opens them (OpenRegular: regular
// files, no link followed) and are hostile: every timing line goes
// through the one parser of the format (scriptfmt.ParseLine), and an
// entry that accounts for bytes the typescript does not hold stops the
// play with an error naming the line, before any of its bytes are
// written: Play never writes more than the typescript holds, nor anything
// from its start or done lines.
func Play(ctx context.Context, dir string, w io.Writer, opts PlayOptions) error {
	if !(opts.Speed > 0) {
		return fmt.Errorf("speed %v is not positive", opts.Speed)
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	p, err := openPlayback(dir, opts)
	if err != nil {
		return err
	}
	defer p.close()
	if err := p.run(ctx, w); err != nil && !errors.Is(err, errQuit) {
		return err
	}
	return nil
}

// playback is one Play: the session's files and where it is in them.
type playback struct {
	dir    string
	opts   PlayOptions
	tm     *lineTail // the timing file
	log    *lineTail // the integrity log, for its close record (Follow)
	ts     *os.File
	tsPath string
	tsSize int64 // the typescript's size when it was opened or last looked at
	tsOff  int64 // the typescript offset of the next entry's bytes; 0 before the start line
	due    time.Time
	// elapsed is the recorded time of the entries read so far: the sum
	// of their delays, unscaled (Start is measured in it).
	elapsed time.Duration
	speed   float64 // opts.Speed, as PlayFaster and PlaySlower change it
	// paused holds the play before its next entry; left is what remained
	// of the wait for it when it was paused. stepping releases entries,
	// paused or not, until one is written.
	paused, stepping bool
	left             time.Duration
}

func openPlayback(dir string, opts PlayOptions) (_ *playback, err error) {
	p := &playback{dir: dir, opts: opts, speed: opts.Speed, tsPath: filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile)}
	defer func() {
		if err != nil {
			p.close() // what was opened before the error
		}
	}()
	if p.tm, err = openTail(dir, vocab.TimingFile, scriptfmt.MaxLine); err != nil {
		return nil, err
	}
	if opts.Follow {
		if p.log, err = openTail(dir, vocab.LogFile, evidence.MaxRecordLine); err != nil {
			return nil, err
		}
	}
	if p.ts, p.tsSize, err = safefs.OpenRegular(dir, vocab.PTYDir+"/"+vocab.TypescriptFile); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *playback) close() {
	for _, t := range []*lineTail{p.tm, p.log} {
		if t != nil {
			t.f.Close()
		}
	}
	if p.ts != nil {
		p.ts.Close()
	}
}

// run plays the timing file to its end; with Follow it keeps looking
// until the log's close record, then plays what the timing file holds,
// or until the timing file has not grown for IdleLimit.
func (p *playback) run(ctx context.Context, w io.Writer) error {
	p.due = time.Now()
	var idle time.Duration // waited since the timing file last grew
	for {
		// The close record is looked for before the timing file is read:
		// the recorder writes the timing file's last lines before it, so
		// once it is seen, one more read reaches the end.
		ended, err := p.sessionEnded()
		if err != nil {
			return err
		}
		before := p.tm.off
		if err := p.tm.poll(func(line []byte, n int, off int64) error { return p.entry(ctx, w, line, n, off) }); err != nil {
			return err
		}
		if !p.opts.Follow || ended {
			return p.tm.finish()
		}
		// Only the time spent waiting for the session counts: playing
		// what was there, or a pause, is not the session being idle.
		if p.tm.off != before {
			idle = 0
		} else if p.opts.IdleLimit > 0 && idle >= p.opts.IdleLimit {
			return &IdleError{Dir: p.dir, Limit: p.opts.IdleLimit}
		}
		waited := time.Now()
		if err := p.sleep(ctx, p.opts.Poll); err != nil {
			return err
		}
		idle += time.Since(waited)
	}
}

// sessionEnded reports whether the log has its close record, or a
// restarted sidecar wrote the recovery statement of a session it found
// open (no close record will come). Without Follow the files are played
// as they are.
func (p *playback) sessionEnded() (bool, error) {
	if !p.opts.Follow {
		return true, nil
	}
	closed := false
	err := p.log.poll(func(line []byte, n int, _ int64) error {
		var r integrity.Record
		if err := json.Unmarshal(line, &r); err != nil {
			return fmt.Errorf("%s record %d: %w", p.log.path, n-1, err)
		}
		closed = closed || r.Type == vocab.TypeClose
		return nil
	})
	if err != nil || closed {
		return closed, err
	}
	f, _, err := safefs.OpenRegular(p.dir, vocab.PTYDir+"/"+vocab.RecoveryFile)
	if err == nil {
		f.Close()
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// entry plays one timing line: it waits for the entry's time, then
// writes its bytes if its stream is played, else passes over them.
func (p *playback) entry(ctx context.Context, w io.Writer, line []byte, n int, off int64) error {
	e, err := scriptfmt.ParseLine(string(line))
	if err != nil {
		return &scriptfmt.LineError{Path: p.tm.path, Line: n, Off: off, Err: err}
	}
	if err := p.wait(ctx, e.Delay); err != nil {
		return err
	}
	if e.Kind != 'I' && e.Kind != 'O' {
		return nil
	}
	if err := p.bytesFor(e.N); err != nil {
		return &scriptfmt.LineError{Path: p.tm.path, Line: n, Off: off, Err: err}
	}
	section := io.NewSectionReader(p.ts, p.tsOff, e.N)
	p.tsOff += e.N
	if e.Kind == 'I' && !p.opts.Input {
		return nil
	}
	if _, err := io.Copy(w, section); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	p.stepping = false // a step is one chunk written
	return nil
}

// bytesFor checks that the typescript holds n more bytes at tsOff,
// skipping its start line first. The recorder writes the bytes before
// their timing line, so a reader finds them there too; an entry
// the typescript does not hold is hostile or broken, and nothing of it is
// written.
func (p *playback) bytesFor(n int64) error {
	// A session being recorded grows: its size is looked at again when
	// the entry needs more than was there at the last look.
	if p.tsOff == 0 || n > p.tsSize-p.tsOff {
		st, err := p.ts.Stat()
		if err != nil {
			return err
		}
		p.tsSize = st.Size()
	}
	if p.tsOff == 0 {
		start, err := scriptfmt.ReadStartLine(bufio.NewReader(io.NewSectionReader(p.ts, 0, p.tsSize)))
		if err != nil {
			return fmt.Errorf("%s: %w", p.tsPath, err)
		}
		p.tsOff = start
	}
	if n > p.tsSize-p.tsOff {
		return fmt.Errorf("the entry accounts for %d bytes at offset %d of %s, which holds %d: not played", n, p.tsOff, p.tsPath, p.tsSize)
	}
	return nil
}

// wait sleeps until the entry is due: the previous one's time plus delay,
// divided by the speed and capped by MaxDelay, with no wait at all up to
// Start. A follower that waited for the entry to be written has spent that
// time already and does not wait again. Control's actions are taken while
// it waits, and once even when the entry is due already, so a pause typed
// during a burst of output holds it.
func (p *playback) wait(ctx context.Context, delay time.Duration) error {
	p.due = p.due.Add(p.scaled(delay))
	now := time.Now()
	if p.due.Before(now) {
		p.due = now
	}
	if p.paused {
		p.left = p.due.Sub(now) // a paused clock does not run
	}
	for {
		switch {
		case p.stepping:
			p.due = time.Now()
			return nil
		case p.paused:
			select {
			case <-ctx.Done():
				return ctx.Err()
			case a := <-p.opts.Control:
				if err := p.steer(a); err != nil {
					return err
				}
			}
			continue
		}
		rest := time.Until(p.due)
		if rest <= 0 {
			select {
			case a := <-p.opts.Control:
				if err := p.steer(a); err != nil {
					return err
				}
				continue
			default:
				return ctx.Err()
			}
		}
		t := time.NewTimer(rest)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
			return nil
		case a := <-p.opts.Control:
			t.Stop()
			if err := p.steer(a); err != nil {
				return err
			}
		}
	}
}

// scaled is how long to wait for an entry recorded delay after the one
// before: none up to Start (only the part past Start for the entry that
// crosses it), else delay divided by the speed, capped by MaxDelay.
func (p *playback) scaled(delay time.Duration) time.Duration {
	before := p.elapsed
	p.elapsed += delay
	switch {
	case p.elapsed <= p.opts.Start:
		return 0
	case before < p.opts.Start:
		delay = p.elapsed - p.opts.Start
	}
	d := time.Duration(float64(delay) / p.speed)
	if p.opts.MaxDelay > 0 {
		d = min(d, p.opts.MaxDelay)
	}
	return d
}

// steer takes one action of Control; PlayQuit is errQuit.
func (p *playback) steer(a PlayAction) error {
	now := time.Now()
	switch a {
	case PlayPause:
		if p.paused {
			p.paused, p.due = false, now.Add(p.left)
		} else {
			p.paused, p.left = true, max(0, p.due.Sub(now))
		}
	case PlayFaster:
		p.setSpeed(min(p.speed*2, MaxSpeed), now)
	case PlaySlower:
		p.setSpeed(max(p.speed/2, MinSpeed), now)
	case PlayStep:
		p.stepping = p.paused
	case PlayQuit:
		return errQuit
	}
	return nil
}

// setSpeed changes the speed, and what remains of the wait under way to
// match: the entry stays due at the same point of the recording.
func (p *playback) setSpeed(s float64, now time.Time) {
	ratio := p.speed / s
	if p.paused {
		p.left = time.Duration(float64(p.left) * ratio)
	} else if rest := p.due.Sub(now); rest > 0 {
		p.due = now.Add(time.Duration(float64(rest) * ratio))
	}
	p.speed = s
}

// sleep waits d for a growing session, taking Control's actions: a pause
// holds the next entry (wait), a quit ends the play now.
func (p *playback) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case a := <-p.opts.Control:
			if err := p.steer(a); err != nil {
				return err
			}
		}
	}
}

// lineTail reads the complete lines of a file that may still be growing:
// each poll reads from where the last one stopped to the file's size at
// that moment, and keeps an unfinished last line (at most max bytes) for
// the next poll.
type lineTail struct {
	f       *os.File
	path    string
	max     int
	off     int64  // file offset read up to
	lineOff int64  // offset of the start of partial
	partial []byte // an unfinished last line
	lines   int    // complete lines read
	buf     []byte
}

func openTail(dir, name string, max int) (*lineTail, error) {
	f, _, err := safefs.OpenRegular(dir, vocab.PTYDir+"/"+name)
	if err != nil {
		return nil, err
	}
	return &lineTail{f: f, path: filepath.Join(dir, vocab.PTYDir, name), max: max, buf: make([]byte, 64<<10)}, nil
}

// poll calls fn with each complete line (without its newline) that the
// file holds now, its 1-based number and its offset. A line longer than
// max is refused as the format's parsers refuse it.
func (t *lineTail) poll(fn func(line []byte, n int, off int64) error) error {
	st, err := t.f.Stat()
	if err != nil {
		return err
	}
	for t.off < st.Size() {
		k, err := t.f.ReadAt(t.buf[:min(int64(len(t.buf)), st.Size()-t.off)], t.off)
		if k == 0 && err != nil {
			return fmt.Errorf("%s: %w", t.path, err)
		}
		t.off += int64(k)
		chunk := t.buf[:k]
		for len(chunk) > 0 {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				t.partial = append(t.partial, chunk...)
				break
			}
			t.partial = append(t.partial, chunk[:i]...)
			chunk = chunk[i+1:]
			if err := t.tooLong(); err != nil {
				return err
			}
			t.lines++
			line, off := t.partial, t.lineOff
			t.partial, t.lineOff = t.partial[:0], t.lineOff+int64(len(line))+1
			if err := fn(line, t.lines, off); err != nil {
				return err
			}
		}
		if err := t.tooLong(); err != nil {
			return err
		}
	}
	return nil
}

func (t *lineTail) tooLong() error {
	if len(t.partial) > t.max {
		return &scriptfmt.LineError{Path: t.path, Line: t.lines + 1, Off: t.lineOff,
			Err: fmt.Errorf("line longer than %d bytes", t.max)}
	}
	return nil
}

// finish refuses an unfinished last line once the file is complete: the
// writer ends every line.
func (t *lineTail) finish() error {
	if len(t.partial) > 0 {
		return &scriptfmt.LineError{Path: t.path, Line: t.lines + 1, Off: t.lineOff,
			Err: fmt.Errorf("%w: the last line has no newline: %.60q", scriptfmt.ErrTimingLine, t.partial)}
	}
	return nil
}
