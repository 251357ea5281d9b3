package tests

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRefusedRequestFloodLogIsBounded sends 3000 refused channel requests
// on one session: the log must not grow with them (one line each was
// 5.4 MB for 40,000), yet every refusal is in it, as a line or a count,
// by the time the session has ended.
func TestRefusedRequestFloodLogIsBounded(t *testing.T) {
	const flood = 3000
	h := newHarness(t)
	ch, _, err := h.dial(t).OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range flood {
		// Replies keep the flood in step with the server, so every request
		// was handled when the loop ends.
		if ok, err := ch.SendRequest("x11-req", true, nil); ok || err != nil {
			t.Fatalf("request %d: accepted %v, err %v", i, ok, err)
		}
	}
	elapsed := time.Since(start)
	ch.Close()

	counts := regexp.MustCompile(`msg="channel requests refused, not logged one by one" .*count=(\d+)`)
	var lines, counted int
	waitFor(t, 10*time.Second, "every refusal in the log, as a line or a count", func() bool {
		logs := h.logs.String()
		lines, counted = strings.Count(logs, `msg="request refused"`), 0
		for _, m := range counts.FindAllStringSubmatch(logs, -1) {
			n, _ := strconv.Atoi(m[1])
			counted += n
		}
		return lines+counted >= flood
	})
	if lines+counted != flood {
		t.Errorf("%d lines and %d counted for %d refusals", lines, counted, flood)
	}
	// 10 lines per started second of the flood, plus the window the close
	// falls in.
	if limit := 10 * (int(elapsed/time.Second) + 2); lines > limit {
		t.Errorf("%d refusal lines in %v, want at most %d", lines, elapsed, limit)
	}
}
