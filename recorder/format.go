package recorder

import (
	"strconv"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Header is one provenance line written as `H <delay> NAME VALUE` in the timing file.
type Header = scriptfmt.Header

// start is what script's start line says of m.
func (m Meta) start() scriptfmt.Start {
	return scriptfmt.Start{Command: m.Command, Term: m.Term, TTY: m.TTY, Rows: m.Rows, Cols: m.Cols}
}

// startHeaders lists the H entries script(1) writes at start, in its order
// (term-utils/script.c, main), followed by the caller's extra headers. The
// log names are relative so a session directory can be moved as a unit.
func startHeaders(m Meta, wall time.Time) []Header {
	hs := []Header{{Name: vocab.ScriptStartTime, Value: wall.Format(scriptfmt.TimeLayout)}}
	if m.start().HasPTY() {
		hs = appendNonEmpty(hs, "TERM", m.Term)
		hs = appendNonEmpty(hs, "TTY", m.TTY)
		hs = append(hs, Header{Name: vocab.ScriptColumns, Value: strconv.Itoa(m.Cols)}, Header{Name: vocab.ScriptLines, Value: strconv.Itoa(m.Rows)})
	}
	hs = appendNonEmpty(hs, "SHELL", m.Shell)
	hs = appendNonEmpty(hs, "COMMAND", m.Command)
	hs = append(hs,
		Header{Name: "TIMING_LOG", Value: timingName},
		Header{Name: "OUTPUT_LOG", Value: typescriptName},
		Header{Name: "INPUT_LOG", Value: typescriptName})
	return append(hs, m.Headers...)
}

func appendNonEmpty(hs []Header, name, value string) []Header {
	if value == "" {
		return hs
	}
	return append(hs, Header{Name: name, Value: value})
}
