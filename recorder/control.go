package recorder

import (
	"strconv"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Control events (window changes, and the requests a client sends while
// its session runs) come at the client's pace, and each is a log record
// (and, in strict mode, a signed fsynced checkpoint). --max-transcript-mb
// bounds the bytes, not these; so a session gets at most MaxControlRecords
// of them. Window changes are also coalesced when they come faster than
// resizeRate: the PTY gets every one, and the next resize record carries
// the last size and how many window changes it stands for. Past the bound
// events are only counted, and Close states the excess in one
// events-dropped record (vocab.TypeEventsDropped) before the close record.

// MaxControlRecords bounds the control records (Resize and Control) of one
// session. With the records Create, Annotate and Close write and a
// checkpoint at most per record, a control flood cannot grow the
// integrity log past about twice this many records.
const MaxControlRecords = 512

// The resize token bucket: a burst of resizeBurst records, then resizeRate
// per second; a human resizing a window stays well inside it.
const (
	resizeBurst = 16
	resizeRate  = 2.0
)

// controlState is a session's control-event accounting. Its fields are
// protected by Session.mu.
type controlState struct {
	records int // control records written

	tokens   float64   // resize records that may be written now
	refilled time.Time // when tokens were last topped up; zero before the first resize

	// unrecorded counts window changes applied since the last resize
	// record; rows, cols and at are the latest one's size and time.
	unrecorded int
	rows, cols int
	at         time.Time

	// Events past MaxControlRecords, by kind.
	droppedResizes, droppedSignals, droppedRequests int
}

// takeResizeToken reports whether a resize record may be written at now.
func (c *controlState) takeResizeToken(now time.Time) bool {
	if c.refilled.IsZero() {
		c.tokens = resizeBurst
	} else {
		c.tokens = min(resizeBurst, c.tokens+now.Sub(c.refilled).Seconds()*resizeRate)
	}
	c.refilled = now
	if c.tokens < 1 {
		return false
	}
	c.tokens--
	return true
}

// full reports whether the session's control records are used up.
func (c *controlState) full() bool { return c.records >= MaxControlRecords }

// Control appends a control event the client caused while the session
// runs (a request and the broker's decision) to the integrity log, within
// MaxControlRecords; past it the event is only counted, for the
// events-dropped record (vocab.TypeEventsDropped) at Close.
func (s *Session) Control(typ string, attrs map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	if s.control.full() {
		// Accepted signals were delivered: they get their own count.
		if attrs[vocab.AttrRequest] == "signal" && attrs[vocab.AttrAccepted] == "true" {
			s.control.droppedSignals++
		} else {
			s.control.droppedRequests++
		}
		return nil
	}
	s.control.records++
	if err := s.fail(s.chain.Append(typ, withExactValues(attrs))); err != nil {
		return err
	}
	return s.dirtied(0)
}

// Resize records a window change the PTY already got, as
// `S <delay> SIGWINCH ROWS=r COLS=c` and a resize record; coalesced or
// counted as the package comment on control events describes.
func (s *Session) Resize(rows, cols int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	c := &s.control
	c.unrecorded++
	c.rows, c.cols, c.at = rows, cols, s.now()
	if c.full() || !c.takeResizeToken(c.at) {
		s.armTick()
		return nil
	}
	return s.recordResizes()
}

// recordResizes writes the window changes not yet recorded as one resize
// record with the latest size, or counts them once the bound is reached.
// Callers hold mu.
func (s *Session) recordResizes() error {
	c := &s.control
	if c.unrecorded == 0 {
		return nil
	}
	if c.full() {
		c.droppedResizes += c.unrecorded
		c.unrecorded = 0
		return nil
	}
	attrs := map[string]string{vocab.AttrRows: strconv.Itoa(c.rows), vocab.AttrCols: strconv.Itoa(c.cols)}
	if c.unrecorded > 1 {
		attrs[vocab.AttrCount] = strconv.Itoa(c.unrecorded)
	}
	c.records++
	c.unrecorded = 0
	s.line = scriptfmt.AppendResize(s.line[:0], s.delayAt(c.at), c.rows, c.cols)
	if err := s.fail(s.writeTiming(s.line)); err != nil {
		return err
	}
	if err := s.fail(s.chain.Append(vocab.TypeResize, attrs)); err != nil {
		return err
	}
	return s.dirtied(0)
}

// dropControlRecords writes the events-dropped record (vocab.TypeEventsDropped), when events were
// only counted, with the counts and the last window size the PTY got.
// Callers hold mu.
func (s *Session) dropControlRecords() error {
	c := &s.control
	total := c.droppedResizes + c.droppedSignals + c.droppedRequests
	if total == 0 {
		return nil
	}
	attrs := map[string]string{
		vocab.AttrReason:  vocab.ReasonControlLimit,
		"limit":           strconv.Itoa(MaxControlRecords),
		vocab.AttrCount:   strconv.Itoa(total),
		vocab.AttrResize:  strconv.Itoa(c.droppedResizes),
		vocab.AttrSignal:  strconv.Itoa(c.droppedSignals),
		vocab.AttrRequest: strconv.Itoa(c.droppedRequests),
	}
	if c.droppedResizes > 0 {
		attrs[vocab.AttrRows], attrs[vocab.AttrCols] = strconv.Itoa(c.rows), strconv.Itoa(c.cols)
	}
	return s.chain.Append(vocab.TypeEventsDropped, attrs)
}
