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
}

// DefaultPoll is how often Play --follow looks at a growing session.
const DefaultPoll = 50 * time.Millisecond

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
	if err := p.run(ctx, w); err != nil {
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
}

func openPlayback(dir string, opts PlayOptions) (_ *playback, err error) {
	p := &playback{dir: dir, opts: opts, tsPath: filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile)}
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
// until the log's close record, then plays what the timing file holds.
func (p *playback) run(ctx context.Context, w io.Writer) error {
	p.due = time.Now()
	for {
		// The close record is looked for before the timing file is read:
		// the recorder writes the timing file's last lines before it, so
		// once it is seen, one more read reaches the end.
		ended, err := p.sessionEnded()
		if err != nil {
			return err
		}
		if err := p.tm.poll(func(line []byte, n int, off int64) error { return p.entry(ctx, w, line, n, off) }); err != nil {
			return err
		}
		if !p.opts.Follow || ended {
			return p.tm.finish()
		}
		if err := sleepCtx(ctx, p.opts.Poll); err != nil {
			return err
		}
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
// divided by the speed and capped by MaxDelay. A follower that waited for
// the entry to be written has spent that time already and does not wait
// again.
func (p *playback) wait(ctx context.Context, delay time.Duration) error {
	d := time.Duration(float64(delay) / p.opts.Speed)
	if p.opts.MaxDelay > 0 {
		d = min(d, p.opts.MaxDelay)
	}
	p.due = p.due.Add(d)
	if now := time.Now(); p.due.Before(now) {
		p.due = now
		return nil
	}
	return sleepCtx(ctx, time.Until(p.due))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
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
