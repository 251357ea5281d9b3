package tests

import (
	"errors"
	"regexp"
	"strconv"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/examine"
)

// withPTYEOF sets what a client's EOF on a PTY session does.
func withPTYEOF(m broker.PTYEOF) harnessOption {
	return func(c *broker.Config) { c.PTYEOF = m }
}

// TestPTYEOFHangup: with PTYEOFHangup a client's EOF on a PTY shell hangs
// the shell up, and the record is finalized (close reason client-eof,
// verify OK) before the channel's close reaches the client: a harvest
// started on the close event copies a complete record.
func TestPTYEOFHangup(t *testing.T) {
	h := newHarness(t, withPTYEOF(broker.PTYEOFHangup))
	ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "eof-1", "APTL_RUN_ID": "eof"}, 24, 80)
	ss.send("echo \"PID=$$\"\n")
	m := regexp.MustCompile(`PID=(\d+)\r\n`)
	pid, _ := strconv.Atoi(m.FindStringSubmatch(ss.waitOutput(m))[1])
	ss.stdin.Close() // SSH_MSG_CHANNEL_EOF, the channel stays open
	done := make(chan error, 1)
	go func() { done <- ss.finish() }()
	select {
	case err := <-done:
		var exitErr *gossh.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			t.Fatalf("session ended with %v, want an exit status or signal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the channel did not close after the client's EOF")
	}
	// No waitIdle: the close the client saw must come after the finalize.
	dir := h.sessionDir("eof", "eof-1")
	if r := timingHeaders(t, dir)["APTL_CLOSE_REASON"]; r != "client-eof" {
		t.Errorf("close reason = %q when the channel closed, want client-eof", r)
	}
	if rep := examine.Verify(dir, []gossh.PublicKey{h.hostKey}); !rep.OK() || !rep.Finalized {
		t.Errorf("record at the channel's close: finalized=%v anomalies %v", rep.Finalized, rep.Anomalies)
	}
	waitFor(t, 5*time.Second, "the hung-up shell gone", func() bool { return processGone(pid) })
}

// TestPTYEOFIgnoredByDefault: by default (OpenSSH's behaviour) the EOF
// changes nothing: the shell keeps running and the record stays open until
// the client closes, with close reason client-closed.
func TestPTYEOFIgnoredByDefault(t *testing.T) {
	h := newHarness(t)
	c := h.dial(t)
	ss := openShell(t, c, map[string]string{"APTL_SESSION_ID": "eof-2", "APTL_RUN_ID": "eof"}, 24, 80)
	ss.send("echo READY_EOF\n")
	ss.waitOutput(regexp.MustCompile(`READY_EOF\r\n`))
	ss.stdin.Close()
	// A session opened and finished after the EOF is ordered behind it on
	// the connection; once it is gone, the shell's session must remain.
	if _, _, err := run(t, c, nil, "true"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the exec session released", func() bool { return h.srv.ActiveSessions() <= 1 })
	dir := h.sessionDir("eof", "eof-2")
	if n, r := h.srv.ActiveSessions(), timingHeaders(t, dir)["APTL_CLOSE_REASON"]; n != 1 || r != "" {
		t.Fatalf("after the EOF: %d active sessions, close reason %q; want the shell still open", n, r)
	}
	c.Close()
	h.waitIdle(t)
	if r := timingHeaders(t, dir)["APTL_CLOSE_REASON"]; r != "client-closed" {
		t.Errorf("close reason = %q, want client-closed", r)
	}
}
