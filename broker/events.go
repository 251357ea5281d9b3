package broker

import (
	"encoding/hex"
	"errors"
	"strconv"
	"strings"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// SSH control events belong in the same chain as the bytes (the request
// record of docs/RECORD.md, "Integrity log and verification"):
// every channel request the client sent, with what the broker decided. The
// integrity log is evidence on the private volume, so unlike the
// application log it may say which env names were sent and which ids; env
// values other than validated ids stay out of it too.

// maxPendingEvents bounds the events kept before the record exists (the
// request phase); past it they are only counted.
const maxPendingEvents = 256

type pendingEvent struct {
	typ   string
	attrs map[string]string
}

// requestAttrs describes one channel request for the integrity log.
func requestAttrs(reqType string, payload []byte, ok bool, err error) map[string]string {
	a := map[string]string{vocab.AttrRequest: logSafeType(reqType), vocab.AttrAccepted: strconv.FormatBool(ok)}
	if err != nil {
		a[vocab.AttrReason] = err.Error()
	}
	switch reqType {
	case "pty-req":
		if p, perr := parsePtyReq(payload); perr == nil {
			a["term"], a["modes"] = p.term, hex.EncodeToString(p.modes)
			a["cols"], a["rows"] = strconv.Itoa(int(p.win.cols)), strconv.Itoa(int(p.win.rows))
		}
	case "env":
		if name, value, perr := parseEnv(payload); perr == nil {
			a["name"] = logSafe(name)
			if ok && strings.HasPrefix(name, "APTL_") {
				a["value"] = value // accepted APTL_* values are validated ids
			}
		}
	case "signal", "subsystem":
		if name, perr := parseNamed(reqType, payload); perr == nil {
			a["name"] = logSafe(name)
		}
	case "window-change":
		if w, perr := parseWindowChange(payload); perr == nil {
			a["cols"], a["rows"] = strconv.Itoa(int(w.cols)), strconv.Itoa(int(w.rows))
		}
	}
	return a
}

// logSafeType keeps request type names (ASCII words like "pty-req" or
// "auth-agent-req@openssh.com") and marks anything else.
func logSafeType(t string) string {
	if len(t) > 64 {
		return "<invalid>"
	}
	for _, c := range []byte(t) {
		if c <= ' ' || c >= 0x7f {
			return "<invalid>"
		}
	}
	return t
}

// event records a control event: into the record once it exists (within
// the recorder's per-session bound, recorder.MaxControlRecords), else into
// the bounded pending list that start writes after the open record. Only
// the request loop calls it.
func (ss *session) event(typ string, attrs map[string]string) {
	if r := ss.run.Load(); r != nil {
		// A request that arrives after the record was finalized (a signal
		// for a process that already exited) has no record to go into.
		if err := r.rec.Control(typ, attrs); err != nil && !errors.Is(err, recorder.ErrClosed) {
			ss.stop(ioCause(err))
		}
		return
	}
	if len(ss.pending) < maxPendingEvents {
		ss.pending = append(ss.pending, pendingEvent{typ, attrs})
	} else {
		ss.droppedEvents++
	}
}

// flushPendingEvents writes the request-phase events into a new record.
func (ss *session) flushPendingEvents(r *run) error {
	for _, e := range ss.pending {
		if err := r.rec.Event(e.typ, e.attrs); err != nil {
			return err
		}
	}
	if ss.droppedEvents > 0 {
		return r.rec.Event(vocab.TypeEventsDropped, map[string]string{vocab.AttrCount: strconv.Itoa(ss.droppedEvents)})
	}
	return nil
}
