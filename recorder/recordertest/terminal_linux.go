package recordertest

import (
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// Terminal is a PTY session: the window it starts with and what it saw,
// in order. Each step is a chunk of a stream, or a window change.
type Terminal struct {
	ID         string
	User       string // the APTL_LOGIN_USER header; "" leaves it out
	Rows, Cols int
	Steps      []Step
	// MaxBytes is the recorder's store limit (recorder.Options); 0 for
	// none. Bytes past it leave size-limit gap records.
	MaxBytes int64
}

// Step is one read of a stream (Chunk set) or one window change (Rows
// and Cols set, Chunk empty).
type Step struct {
	Chunk
	Rows, Cols int
}

// Resize is a window change to rows × cols.
func Resize(rows, cols int) Step { return Step{Rows: rows, Cols: cols} }

// Steps makes chunks steps.
func Steps(chunks ...Chunk) []Step {
	out := make([]Step, len(chunks))
	for i, c := range chunks {
		out[i] = Step{Chunk: c}
	}
	return out
}

// RecordTerminal records term with the real recorder under root as run
// RunID, each step its own timing entry, closes it with exit code 0 and
// returns the session folder.
func RecordTerminal(t testing.TB, root string, term Terminal) string {
	t.Helper()
	m := recorder.Meta{RunID: RunID, SessionID: term.ID, Term: "xterm", TTY: "/dev/pts/0", Rows: term.Rows, Cols: term.Cols}
	if term.User != "" {
		m.Headers = []recorder.Header{{Name: vocab.HeaderLoginUser, Value: term.User}}
	}
	s, err := recorder.Create(root, m, recorder.Options{Signer: Signer(), MaxBytes: term.MaxBytes})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range term.Steps {
		if st.Stream == "" {
			err = s.Resize(st.Rows, st.Cols)
		} else {
			err = st.record(s)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	return s.Dir()
}

// RecordLarge records under root a PTY session of at least size bytes of
// output, in reads of about 4 KiB of 80-column lines, with a keystroke
// every 64 reads, and returns its folder: the record of the web player's
// benchmark and browser load test.
func RecordLarge(tb testing.TB, root string, size int) string {
	tb.Helper()
	line := strings.Repeat("0123456789abcdef", 5)[:78] + "\r\n"
	read := strings.Repeat(line, 4096/len(line))
	var steps []Step
	for n, i := 0, 0; n < size; n, i = n+len(read), i+1 {
		steps = append(steps, Step{Chunk: Out(read)})
		if i%64 == 0 {
			steps = append(steps, Step{Chunk: In("x")})
		}
	}
	return RecordTerminal(tb, root, Terminal{ID: "large", Rows: 24, Cols: 80, Steps: steps})
}
