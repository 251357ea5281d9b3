package tests

import (
	"regexp"
	"testing"
)

// TestLogBytesOutMatchesDelivered: the close log's bytes_out and
// bytes_delivered count the same streams (stdout and stderr together).
func TestLogBytesOutMatchesDelivered(t *testing.T) {
	h := newHarness(t)
	if _, _, err := run(t, h.dial(t), nil, "echo out; echo errr >&2"); err != nil {
		t.Fatal(err)
	}
	h.waitIdle(t)
	m := regexp.MustCompile(`session closed" .*bytes_out=(\d+) bytes_delivered=(\d+)`).FindStringSubmatch(h.logs.String())
	if m == nil {
		t.Fatalf("no close log line:\n%s", h.logs.String())
	}
	if m[1] != "9" || m[2] != m[1] {
		t.Errorf("bytes_out=%s bytes_delivered=%s, want both 9 (stdout 4 + stderr 5)", m[1], m[2])
	}
}
