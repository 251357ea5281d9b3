package tests

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
)

// TestSizeCapWarnsWhenReached: a session whose transcript reaches
// --max-transcript-mb is reported in the log when it happens, while the
// session still runs: one warning line with the session id and the cap,
// and none of the session's bytes.
func TestSizeCapWarnsWhenReached(t *testing.T) {
	const capBytes = 4096
	h := newHarness(t, func(c *broker.Config) { c.MaxTranscriptBytes = capBytes })
	s, stdin, stdout := startSession(t, h, "cap", "capped-1", false, "cat")
	// Typed and echoed: 2 x 3000 bytes, past the 4096-byte cap.
	canary := strings.Repeat("sizecap-canary-", 200)[:3000]
	if _, err := stdin.Write([]byte(canary)); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	readUntil(t, stdout, &got, canary, 10*time.Second)
	const warning = "transcript size cap reached"
	waitFor(t, 10*time.Second, "the size-cap warning while the session runs", func() bool { return strings.Contains(h.logs.String(), warning) })
	if n := h.srv.ActiveSessions(); n != 1 {
		t.Fatalf("%d active sessions when the warning came; want it while the session runs", n)
	}
	stdin.Close()
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	h.waitIdle(t)
	logs := h.logs.String()
	if strings.Count(logs, warning) != 1 {
		t.Errorf("%d size-cap warnings, want 1:\n%s", strings.Count(logs, warning), logs)
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, warning) && (!strings.Contains(line, "level=WARN") || !strings.Contains(line, "session=capped-1") || !strings.Contains(line, "cap_bytes=4096")) {
			t.Errorf("warning %q: want level WARN, the session id and cap_bytes=4096", line)
		}
	}
	if strings.Contains(logs, "sizecap-canary") {
		t.Error("the log holds transcript bytes")
	}
}
