//go:build linux

package examine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// TestPlayFollowIdleLimit: --follow of a session that records nothing more
// stops at the idle limit with an *IdleError saying so, having played what
// was there; a session that keeps recording, each chunk sooner than the
// limit, is followed past it.
func TestPlayFollowIdleLimit(t *testing.T) {
	s, err := recorder.Create(t.TempDir(), recorder.Meta{RunID: "run-1", SessionID: "idle-1"}, recorder.Options{Signer: recordertest.Signer()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(0) })
	if err := s.Output([]byte("before the quiet\r\n")); err != nil {
		t.Fatal(err)
	}
	opts := examine.PlayOptions{Speed: 1, Follow: true, Poll: 10 * time.Millisecond, IdleLimit: 300 * time.Millisecond}

	var out strings.Builder
	start := time.Now()
	err = examine.Play(context.Background(), s.Dir(), &out, opts)
	took := time.Since(start)
	var idle *examine.IdleError
	if !errors.As(err, &idle) || idle.Limit != opts.IdleLimit || !strings.Contains(err.Error(), "nothing new was recorded for 300ms") {
		t.Fatalf("Play --follow of a quiet session: %v, want an IdleError naming the limit", err)
	}
	if took < opts.IdleLimit || took > 5*time.Second || out.String() != "before the quiet\r\n" {
		t.Errorf("stopped after %v having played %q; want after the 300ms limit, with what was recorded", took, out.String())
	}

	// Six chunks 150 ms apart: 900 ms of a session never idle for 300.
	go func() {
		for i := range 6 {
			time.Sleep(150 * time.Millisecond)
			s.Output([]byte{'0' + byte(i)})
		}
	}()
	out.Reset()
	start = time.Now()
	err = examine.Play(context.Background(), s.Dir(), &out, opts)
	if !errors.As(err, &idle) || time.Since(start) < 900*time.Millisecond || !strings.HasSuffix(out.String(), "012345") {
		t.Errorf("a session recording every 150ms: stopped after %v (%v) having played %q; want it followed to its last chunk, then the limit", time.Since(start), err, out.String())
	}
}
