package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/aptl/aptl-kali-capture/examine"
)

// TestPlayKeys: each key of playKeys sends its action, in the order typed,
// whatever the reads' sizes; any other byte (a letter, an arrow key's
// escape sequence, a newline, Q) sends none; readKeys returns when its
// input ends or fails, having sent what came before.
func TestPlayKeys(t *testing.T) {
	const typed = " x+\x1b[A-.\nQq "
	want := []examine.PlayAction{examine.PlayPause, examine.PlayFaster, examine.PlaySlower, examine.PlayStep,
		examine.PlayQuit, examine.PlayPause}
	for _, tt := range []struct {
		how string
		r   func() io.Reader
	}{
		{"at once", func() io.Reader { return strings.NewReader(typed) }},
		{"a byte a read", func() io.Reader { return iotest.OneByteReader(strings.NewReader(typed)) }},
		{"with the last read's error", func() io.Reader { return iotest.DataErrReader(strings.NewReader(typed)) }},
		{"then a failing read", func() io.Reader { return io.MultiReader(strings.NewReader(typed), iotest.ErrReader(io.ErrClosedPipe)) }},
	} {
		actions := make(chan examine.PlayAction, len(typed))
		done := make(chan struct{})
		go func() { readKeys(tt.r(), actions); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: readKeys did not return at the end of its input", tt.how)
		}
		var got []examine.PlayAction
		for len(actions) > 0 {
			got = append(got, <-actions)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %q sent %v, want %v", tt.how, typed, got, want)
		}
	}
	for _, k := range []string{"space pause", "+ faster", "- slower", ". one chunk", "q quit"} {
		if !strings.Contains(playKeys, k) {
			t.Errorf("playKeys, the -h text, does not say %q: %q", k, playKeys)
		}
	}
}
