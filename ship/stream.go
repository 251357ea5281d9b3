package ship

import (
	"context"
	"encoding/hex"
	"errors"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// MaxSegment bounds a segment: a checkpoint that covers more of a file is
// shipped as several, so that a part goes out at least every 5 MiB and a
// retry resends no more.
const MaxSegment = 5 << 20

// Ack records a shipped segment in the session's chain: the attributes of
// a vocab.TypeShipped record. It must not block on the shipper.
type Ack func(attrs map[string]string) error

// ending is how a stream's session ended, as its recorder said.
type ending int

const (
	open     ending = iota
	sealed          // closing records and manifest written: ship the files whole too
	unsealed        // the record is cut: segments only; the next start's recovery seals it and its resume ships the rest
)

// Stream is one session's shipping: the points its recorder marks and the
// segments shipped of each file.
type Stream struct {
	sh                *Shipper
	run, session, dir string
	ack               Ack

	mu      sync.Mutex
	want    map[string]int64 // record file → size its latest checkpoint covers
	since   time.Time        // oldest point not yet worked on
	working time.Time        // oldest point of the round in progress
	end     ending
	queued  bool
	acked   map[string]int64 // record file → bytes acknowledged

	// The worker's own, one at a time.
	files     map[string]*fileShip
	haveWhole map[string]int64 // a start's resume: files the bucket holds whole, by size
	done      chan struct{}
}

// fileShip is how far a file is shipped: its next part and offset.
type fileShip struct {
	next int
	off  int64
	// stopped: its local copy failed (gone, shorter than shipped); the
	// log said so once, and the file is shipped no further this run.
	stopped bool
}

// extend takes part, of size bytes, as listed in the bucket in key
// order: the next part carries the file on; any other is a hole, past
// which the parts are shipped again (false).
func (fs *fileShip) extend(part int, size int64) bool {
	if part != fs.next {
		return false
	}
	fs.off += size
	fs.next++
	return true
}

// Open starts the stream of the session folder dir (run and session are
// its ids); ack records each segment acknowledged while the session is
// open. A session already shipping (a second Open) is an error.
func (s *Shipper) Open(run, session, dir string, ack Ack) (*Stream, error) {
	if !vocab.ValidID(run) || !vocab.ValidID(session) {
		return nil, errors.New("ship: run or session id is not a valid id")
	}
	st := &Stream{sh: s, run: run, session: session, dir: dir, ack: ack,
		want: map[string]int64{}, acked: map[string]int64{}, files: map[string]*fileShip{}, done: make(chan struct{})}
	key := run + "/" + session
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, errors.New("ship: the shipper is stopping")
	}
	if _, ok := s.streams[key]; ok {
		return nil, errors.New("ship: session " + key + " is already shipping")
	}
	s.streams[key] = st
	return st, nil
}

// Point marks a signed checkpoint: sizes are the record files' (by path
// in the session folder) that it covers, to be shipped up to there; the
// witness files are shipped to the size they have when the worker gets
// to them. Points coalesce: a stream behind ships everything up to its
// latest. It never blocks (the recorder calls it holding its lock).
func (st *Stream) Point(sizes map[string]int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for rel, n := range sizes {
		st.want[rel] = max(st.want[rel], n)
	}
	st.mark()
}

// End marks the session's end: sealed (its manifest written), the files
// go whole too once their last segments are shipped; not sealed, the
// segments only. It never blocks; Done says when the stream is shipped.
func (st *Stream) End(isSealed bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.end != open {
		return
	}
	st.end = unsealed
	if isSealed {
		st.end = sealed
	}
	st.mark()
}

// Abandon drops the stream of a session that never started (its folder
// was not published): nothing is shipped. Only before any Point.
func (st *Stream) Abandon() { st.sh.finish(st, false) }

// Done is closed once the stream's end is shipped.
func (st *Stream) Done() <-chan struct{} { return st.done }

// mark notes work to do. Callers hold st.mu.
func (st *Stream) mark() {
	if st.since.IsZero() {
		st.since = st.sh.st.now()
	}
	if !st.queued {
		st.queued = true
		st.sh.enqueue(st)
	}
}

// lag is the oldest checkpoint not acknowledged and the record files'
// bytes not acknowledged.
func (st *Stream) lag() (time.Time, int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	since := st.working
	if since.IsZero() || (!st.since.IsZero() && st.since.Before(since)) {
		since = st.since
	}
	var bytes int64
	for rel, n := range st.want {
		// Past its end a file is shipped to its size, beyond the last
		// point: no negative lag.
		bytes += max(0, n-st.acked[rel])
	}
	return since, bytes
}

// round ships what the stream's points ask for, and reports whether it
// must be queued again (a point came meanwhile).
func (st *Stream) round(ctx context.Context) (again bool) {
	st.mu.Lock()
	want, end := maps.Clone(st.want), st.end
	st.working, st.since = st.since, time.Time{}
	st.mu.Unlock()

	err := st.ship(ctx, want, end)

	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		// Cancelled by Close, or a store that kept dropping an upload:
		// the rest is the next start's.
		if ctx.Err() == nil {
			st.sh.log.Warn("ship: session's shipping stopped; the next start ships the rest", "run", st.run, "session", st.session, "err", err.Error())
		}
		st.working, st.queued = time.Time{}, false
		st.sh.finish(st, false)
		return false
	}
	st.working = time.Time{}
	if !st.since.IsZero() {
		return true
	}
	st.queued = false
	if end != open {
		st.sh.finish(st, true)
	}
	return false
}

// ship ships one round: every file's bytes up to its point (or its size),
// then, for a sealed session, every file whole.
func (st *Stream) ship(ctx context.Context, want map[string]int64, end ending) error {
	files, skipped, err := listSession(st.dir)
	if err != nil && end == open {
		st.sh.log.Warn("ship: session folder unreadable; retried at its next point", "run", st.run, "session", st.session, "err", err)
		return nil
	}
	if err != nil {
		return err // its end: the next start's resume
	}
	for _, rel := range skipped {
		st.sh.log.Warn("ship: not a regular file; not shipped", "run", st.run, "session", st.session, "file", rel)
	}
	for _, f := range files {
		upTo := f.size
		if n, ok := want[f.rel]; ok && end == open {
			upTo = min(n, f.size)
		}
		if err := st.shipSegments(ctx, f.rel, upTo, end == open); err != nil {
			return err
		}
	}
	if end != sealed {
		return nil
	}
	for _, f := range files {
		if n, ok := st.haveWhole[f.rel]; ok && n == f.size {
			continue
		}
		err := st.sh.putWhole(ctx, st.dir, f, wholeKey(st.sh.st.cfg.Prefix, st.run, st.session, f.rel))
		if isLocal(err) {
			st.sh.log.Error("ship: local file unreadable; not shipped whole", "run", st.run, "session", st.session, "file", f.rel, "err", err)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// shipSegments ships the file rel from where it was shipped to upTo, in
// segments of at most MaxSegment, recording each in the chain while the
// session is open (record).
func (st *Stream) shipSegments(ctx context.Context, rel string, upTo int64, record bool) error {
	fs := st.files[rel]
	if fs == nil {
		fs = &fileShip{next: 1}
		st.files[rel] = fs
	}
	for fs.off < upTo && !fs.stopped {
		if fs.next > maxPart {
			st.sh.log.Error("ship: file has more segments than the layout numbers; the rest goes whole at the end", "run", st.run, "session", st.session, "file", rel)
			return nil
		}
		n := min(upTo-fs.off, MaxSegment)
		key := segmentKey(st.sh.st.cfg.Prefix, st.run, st.session, rel, fs.next)
		etag, sum, err := st.sh.putSection(ctx, st.dir, rel, fs.off, n, key)
		if isLocal(err) {
			st.sh.log.Error("ship: local file unreadable; its shipping stops here", "run", st.run, "session", st.session, "file", rel, "offset", fs.off, "err", err)
			fs.stopped = true
			return nil
		}
		if err != nil {
			return err
		}
		if record {
			attrs := map[string]string{
				vocab.AttrFile:       rel,
				vocab.AttrShipPart:   strconv.Itoa(fs.next),
				vocab.AttrShipOffset: strconv.FormatInt(fs.off, 10),
				vocab.AttrShipLength: strconv.FormatInt(n, 10),
				vocab.AttrSHA256:     hex.EncodeToString(sum[:]),
				vocab.AttrShipETag:   boundETag(etag),
			}
			// A session that closed meanwhile takes no more records:
			// the segment is shipped all the same, and verify --shipped
			// finds it.
			_ = st.ack(attrs)
		}
		fs.off += n
		fs.next++
		st.mu.Lock()
		st.acked[rel] = fs.off
		st.mu.Unlock()
	}
	return nil
}

// maxETag bounds the store's entity tag as the chain records it: S3's
// are a quoted MD5 or an MD5 and a part count, under 70 bytes; a store's
// answer must not grow the session's log at will.
const maxETag = 128

// boundETag is the store's entity tag fit for the chain: printable ASCII,
// at most maxETag bytes; anything else is recorded as "" (the segment's
// SHA-256 is the record's claim, the tag only the store's name for it).
func boundETag(etag string) string {
	if len(etag) > maxETag {
		return ""
	}
	for i := 0; i < len(etag); i++ {
		if etag[i] < 0x20 || etag[i] > 0x7e {
			return ""
		}
	}
	return etag
}

// finish ends a stream: removed from the open streams; shipped or not
// (the next start's), Done is closed.
func (s *Shipper) finish(st *Stream, shipped bool) {
	s.mu.Lock()
	if s.streams[st.run+"/"+st.session] == st {
		delete(s.streams, st.run+"/"+st.session)
	}
	s.mu.Unlock()
	if shipped {
		s.log.Debug("ship: session shipped", "run", st.run, "session", st.session)
	}
	select {
	case <-st.done:
	default:
		close(st.done)
	}
}
