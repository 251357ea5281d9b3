package tests

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
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
	if rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{h.hostKey}}, evidence.Options{}); !rep.OK() || !rep.Finalized {
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

// TestPTYEOFHangupSparesPTYExec: hangup applies to PTY shells only. A PTY
// exec whose client sends EOF at once (OpenSSH's `ssh -tt host cmd
// </dev/null` does) still runs to its end, as under sshd.
func TestPTYEOFHangupSparesPTYExec(t *testing.T) {
	h := newHarness(t, withPTYEOF(broker.PTYEOFHangup))
	s, err := h.dial(t).NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Setenv("APTL_SESSION_ID", "eof-exec"); err != nil {
		t.Fatal(err)
	}
	if err := s.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	stdin, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out testutil.LockedBuffer
	s.Stdout = &out
	if err := s.Start("sleep 0.3; echo FINISHED"); err != nil {
		t.Fatal(err)
	}
	stdin.Close() // SSH_MSG_CHANNEL_EOF before the command has run
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("PTY exec ended with %v after the client's EOF, want exit status 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the PTY exec did not end")
	}
	if !strings.Contains(out.String(), "FINISHED") {
		t.Errorf("output %q lacks FINISHED: the command was cut by the EOF", out.String())
	}
	h.waitIdle(t)
	if r := timingHeaders(t, h.sessionDir("_unbound", "eof-exec"))["APTL_CLOSE_REASON"]; r != "shell-exited" {
		t.Errorf("close reason = %q, want shell-exited", r)
	}
}
