package ratelog

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

func jsonLog(buf *testutil.LockedBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, nil))
}

// TestCountsPastTheBurst: past the burst, events are counted, not written,
// and Flush reports the count.
func TestCountsPastTheBurst(t *testing.T) {
	var logs testutil.LockedBuffer
	r := New(jsonLog(&logs), slog.LevelWarn, "refusals not logged one by one", 3, time.Hour)
	for i := range 1000 {
		r.Note("refused", "n", i)
	}
	r.Flush()
	r.Flush() // nothing left: no second count line
	s := logs.String()
	if n := strings.Count(s, `"msg":"refused"`); n != 3 {
		t.Errorf("%d event lines, want the burst of 3", n)
	}
	if n := strings.Count(s, `"level":"WARN","msg":"refusals not logged one by one","count":997,`); n != 1 {
		t.Errorf("want exactly one count line of the other 997: %s", s)
	}
}

// TestWindowEndReportsAndReopens: the window's end reports the count on
// its own (no further event needed), and a new window logs in full again.
func TestWindowEndReportsAndReopens(t *testing.T) {
	var logs testutil.LockedBuffer
	r := New(jsonLog(&logs), slog.LevelInfo, "not logged one by one", 1, 50*time.Millisecond)
	r.Note("event")
	r.Note("event")
	r.Note("event")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), `"msg":"not logged one by one","count":2`) {
		if time.Now().After(deadline) {
			t.Fatalf("the window's end did not report the count: %s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for strings.Count(logs.String(), `"msg":"event"`) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("a new window did not log in full: %s", logs.String())
		}
		r.Note("event")
	}
	r.Flush()
}
