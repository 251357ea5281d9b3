package examine_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// timedSession writes a session folder whose output entries are chunks,
// each recorded delay after the one before, through the format's own
// writer (scriptfmt): play reads no more than the typescript and the
// timing file, and a recorder cannot be made to wait seconds between two
// chunks in a test.
func timedSession(t *testing.T, delay time.Duration, chunks ...string) string {
	t.Helper()
	dir := t.TempDir()
	pty := filepath.Join(dir, vocab.PTYDir)
	if err := os.Mkdir(pty, 0o700); err != nil {
		t.Fatal(err)
	}
	ts := scriptfmt.StartLine(scriptfmt.Start{Term: "xterm", Rows: 24, Cols: 80}, time.Now())
	var tm []byte
	for i, c := range chunks {
		d := delay
		if i == 0 {
			d = 0
		}
		ts = append(ts, c...)
		tm = scriptfmt.AppendTiming(tm, 'O', d, len(c))
	}
	ts = append(ts, scriptfmt.DoneLine(time.Now(), 0)...)
	for name, data := range map[string][]byte{vocab.TypescriptFile: ts, vocab.TimingFile: tm} {
		if err := os.WriteFile(filepath.Join(pty, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// timedWriter records when each write came, and tells wrote of each.
type timedWriter struct {
	mu     sync.Mutex
	start  time.Time
	writes []timedWrite
	wrote  chan string
}

type timedWrite struct {
	at time.Duration
	p  string
}

func newTimedWriter() *timedWriter {
	return &timedWriter{start: time.Now(), wrote: make(chan string, 100)}
}

func (w *timedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, timedWrite{time.Since(w.start), string(p)})
	w.mu.Unlock()
	w.wrote <- string(p)
	return len(p), nil
}

func (w *timedWriter) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, x := range w.writes {
		b.WriteString(x.p)
	}
	return b.String()
}

// TestPlayStart: --start writes what was recorded up to the offset at
// once and the rest with its timing, counted from the offset; the bytes
// are those of a full play, and those past the offset its tail.
func TestPlayStart(t *testing.T) {
	// Chunks recorded at 0, 1, 2, 3 and 4 seconds.
	dir := timedSession(t, time.Second, "zero ", "one ", "two ", "three ", "four")
	var full bytes.Buffer
	if err := examine.Play(context.Background(), dir, &full, examine.PlayOptions{Speed: 1000}); err != nil {
		t.Fatal(err)
	}
	w := newTimedWriter()
	if err := examine.Play(context.Background(), dir, w, examine.PlayOptions{Speed: 1, Start: 2500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if w.output() != full.String() {
		t.Fatalf("play --start wrote %q, a full play %q", w.output(), full.String())
	}
	if len(w.writes) != 5 {
		t.Fatalf("%d writes, want one per chunk: %v", len(w.writes), w.writes)
	}
	// Up to the offset (0, 1, 2 s): at once. After it (3, 4 s): 0.5 s
	// past the offset, then 1 s more, in real time.
	if at := w.writes[2].at; at > 400*time.Millisecond {
		t.Errorf("the chunks before the offset were written by %v, not at once", at)
	}
	if gap := w.writes[3].at - w.writes[2].at; gap < 450*time.Millisecond {
		t.Errorf("the first chunk past the offset came %v after the fast-forward, want 0.5s (3s - 2.5s)", gap)
	}
	if gap := w.writes[4].at - w.writes[3].at; gap < 950*time.Millisecond {
		t.Errorf("the last chunk came %v after the one before, want the recorded 1s", gap)
	}
	if tail := w.writes[3].p + w.writes[4].p; !strings.HasSuffix(full.String(), tail) || tail != "three four" {
		t.Errorf("what was played in real time, %q, is not the full play's tail from 2.5s", tail)
	}

	// An offset past the end writes everything at once.
	w = newTimedWriter()
	if err := examine.Play(context.Background(), dir, w, examine.PlayOptions{Speed: 1, Start: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if w.output() != full.String() || w.writes[len(w.writes)-1].at > 400*time.Millisecond {
		t.Errorf("--start past the end: %q by %v, want the whole output at once", w.output(), w.writes[len(w.writes)-1].at)
	}
}

// TestPlayControl: a pause holds the play (nothing more is written while
// it lasts), a step while paused writes exactly one chunk, a resume goes
// on, a quit ends the play at once, and a faster speed shortens the pause
// under way.
func TestPlayControl(t *testing.T) {
	dir := timedSession(t, 300*time.Millisecond, "1", "2", "3", "4", "5")
	control := make(chan examine.PlayAction, 4)
	w := newTimedWriter()
	done := make(chan error, 1)
	control <- examine.PlayPause // before the first chunk
	go func() {
		done <- examine.Play(context.Background(), dir, w, examine.PlayOptions{Speed: 1, Control: control})
	}()
	quiet := func(what string) {
		t.Helper()
		select {
		case p := <-w.wrote:
			t.Fatalf("%s: %q was written", what, p)
		case err := <-done:
			t.Fatalf("%s: play ended (%v)", what, err)
		case <-time.After(900 * time.Millisecond): // three chunks' time
		}
	}
	next := func(want string) {
		t.Helper()
		select {
		case p := <-w.wrote:
			if p != want {
				t.Fatalf("wrote %q, want %q", p, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q was not written", want)
		}
	}
	quiet("paused")
	control <- examine.PlayStep
	next("1")
	quiet("paused after a step")
	control <- examine.PlayStep
	next("2")
	quiet("paused after a second step")
	control <- examine.PlayPause // resume
	next("3")
	control <- examine.PlayQuit
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("quit: Play returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("quit did not end the play")
	}
	// "4" was due 300 ms after "3": a quit taken at once writes no more.
	if got := w.output(); got != "123" {
		t.Errorf("wrote %q, want 123 (paused, two steps, resumed, quit at once)", got)
	}

	// Four times faster, twice: the 2 s pauses take 1/16 of their time.
	slow := timedSession(t, 2*time.Second, "a", "b", "c")
	control = make(chan examine.PlayAction, 8)
	for range 4 {
		control <- examine.PlayFaster
	}
	control <- examine.PlaySlower // and one back: eight times
	start := time.Now()
	var out bytes.Buffer
	if err := examine.Play(context.Background(), slow, &out, examine.PlayOptions{Speed: 1, Control: control}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); out.String() != "abc" || took > 2*time.Second || took < 400*time.Millisecond {
		t.Errorf("at eight times the speed: %q in %v, want abc in 0.5s (4s recorded)", out.String(), took)
	}
}
