package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// withPTYEOF sets what a client's EOF on a PTY session does.
func withPTYEOF(m broker.PTYEOF) harnessOption {
	return func(c *broker.Config) { c.PTYEOF = m }
}

// withPTYEOFWait sets PTYEOFChar's bound on the session's end.
func withPTYEOFWait(d time.Duration) harnessOption {
	return func(c *broker.Config) { c.PTYEOFWait = d }
}

// ptyEOFRecords are the pty-eof records of a session's integrity log.
func ptyEOFRecords(t *testing.T, dir string) []integrity.Record {
	t.Helper()
	var rs []integrity.Record
	for _, r := range diskLogRecords(t, dir) {
		if r.Type == vocab.TypePTYEOF {
			rs = append(rs, r)
		}
	}
	return rs
}

// checkEOFSession verifies a PTYEOFChar session's record: it verifies
// and is finalized with reason, it holds one pty-eof record that wrote
// VEOF (04) when written is set, and its input stream is exactly what the
// client sent: the EOF character is the sidecar's, not client input.
func checkEOFSession(t *testing.T, h *harness, dir, reason string, written bool, sent []byte) {
	t.Helper()
	checkFinalized(t, dir, h.hostKey, reason)
	rs := ptyEOFRecords(t, dir)
	switch {
	case len(rs) != 1:
		t.Errorf("%d pty-eof records, want 1: %+v", len(rs), rs)
	case written && rs[0].Attrs[vocab.AttrEOFChar] != "04":
		t.Errorf("pty-eof record %v: want eof_char 04 written", rs[0].Attrs)
	case !written && rs[0].Attrs[vocab.AttrEOFChar] != "":
		t.Errorf("pty-eof record %v: want no character written", rs[0].Attrs)
	}
	if got := replay(t, dir, "in"); !bytes.Equal(got, sent) {
		t.Errorf("recorded input (%d bytes) differs from what the client sent (%d bytes) at byte %d", len(got), len(sent), firstDiff(got, sent))
	}
	// The timing file's I lines and the chain's input count say the same.
	var timedIn int64
	f, err := os.Open(filepath.Join(dir, vocab.PTYDir, vocab.TimingFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := scriptfmt.Scan(f, vocab.TimingFile, func(e scriptfmt.Entry) error {
		if e.Kind == 'I' {
			timedIn += e.N
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{h.hostKey}}, evidence.Options{})
	if timedIn != int64(len(sent)) || rep.Bytes.In != int64(len(sent)) {
		t.Errorf("input: timing I lines %d bytes, records %d, want the %d the client sent", timedIn, rep.Bytes.In, len(sent))
	}
}

// TestPTYEOFCharOpenSSHPiped: on the default setting, 50 commands piped
// into `ssh -tt` all run, in order, and the shell exits 0 on the EOF
// character: the commands and the EOF reach the broker before the shell
// has started, so the character must wait until the shell reads at its
// prompt (a ^D written at once is lost in canonical mode).
func TestPTYEOFCharOpenSSHPiped(t *testing.T) { testPTYEOFCharOpenSSHPiped(t) }

// testPTYEOFCharOpenSSHPiped is TestPTYEOFCharOpenSSHPiped with extra
// harness options (agent_suites_test.go runs it with the agent adapter).
func testPTYEOFCharOpenSSHPiped(t *testing.T, opts ...harnessOption) {
	h := newHarness(t, opts...)
	var in bytes.Buffer
	for i := range 50 {
		fmt.Fprintf(&in, "echo cmd-$((%d+1000))\n", i)
	}
	sent := in.Bytes()
	cmd := h.openssh(t, "-tt")
	cmd.Env = append(cmd.Env, "APTL_SESSION_ID=eof-piped")
	cmd.Stdin = bytes.NewReader(sent)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if code := exitCode(t, cmd.Run()); code != 0 {
		t.Fatalf("ssh exited %d after %v, want 0 (stderr %q)", code, time.Since(start), stderr.String())
	}
	t.Logf("50 piped commands and the EOF: ssh exited 0 after %v", time.Since(start))
	dir := h.sessionDir("openssh", "eof-piped")
	// The arithmetic runs in the shell, so cmd-1000 appears only as
	// output, never as the echo of the typed line.
	for what, b := range map[string][]byte{"client output": stdout.Bytes(), "typescript": replay(t, dir, "out")} {
		last := -1
		for i := range 50 {
			at := bytes.Index(b, []byte(fmt.Sprintf("cmd-%d\r\n", i+1000)))
			if at < last {
				t.Errorf("%s: output of command %d missing or out of order", what, i)
				break
			}
			last = at
		}
	}
	checkEOFSession(t, h, dir, "shell-exited", true, sent)
}

// TestPTYEOFCharFallback: a raw-mode program that takes ^D as a byte
// (cat -v after stty raw) gets the character, shows it, and keeps
// running; the bounded fallback hangs it up, the record says
// client-eof-timeout and verifies, and its input is only what was sent.
func TestPTYEOFCharFallback(t *testing.T) { testPTYEOFCharFallback(t) }

// testPTYEOFCharFallback is TestPTYEOFCharFallback with extra harness
// options (agent_suites_test.go runs it with the agent adapter).
func testPTYEOFCharFallback(t *testing.T, opts ...harnessOption) {
	const wait = 400 * time.Millisecond
	h := newHarness(t, append(opts, withPTYEOFWait(wait))...)
	ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "eof-raw", "APTL_RUN_ID": "eof"}, 24, 80)
	ss.send("stty raw -echo; echo RAW_$((6*7)); exec cat -v\n")
	ss.waitOutput(regexp.MustCompile(`RAW_42`))
	// cat -v reading in raw mode: the shell's echo of the line is done.
	time.Sleep(100 * time.Millisecond)
	eofAt := time.Now()
	ss.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- ss.finish() }()
	select {
	case <-done:
	case <-time.After(wait + 10*time.Second):
		t.Fatal("the channel did not close after the fallback's bound")
	}
	if took := time.Since(eofAt); took < wait {
		t.Errorf("closed %v after the EOF, before the %v bound: not the fallback", took, wait)
	}
	if !strings.Contains(ss.received.String(), "^D") {
		t.Errorf("output %q lacks cat -v's ^D: the EOF character did not reach the program", ss.received.String())
	}
	dir := h.sessionDir("eof", "eof-raw")
	checkEOFSession(t, h, dir, "client-eof-timeout", true, ss.sent.Bytes())
	if rs := ptyEOFRecords(t, dir); len(rs) == 1 && rs[0].Attrs[vocab.AttrICanon] != "false" {
		t.Errorf("pty-eof record %v: want icanon false (raw mode)", rs[0].Attrs)
	}
}

// TestPTYEOFCharBusyTerminal: a command typed ahead that outlasts the
// bound keeps the character from being written (the terminal's reader
// never waits with nothing unread); the fallback hangs up, and the
// pty-eof record says terminal-busy.
func TestPTYEOFCharBusyTerminal(t *testing.T) {
	const wait = 300 * time.Millisecond
	h := newHarness(t, withPTYEOFWait(wait))
	ss := openShell(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "eof-busy", "APTL_RUN_ID": "eof"}, 24, 80)
	ss.send("echo BUSY_$((6*7)); sleep 30\n")
	ss.waitOutput(regexp.MustCompile(`BUSY_42`))
	ss.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- ss.finish() }()
	select {
	case <-done:
	case <-time.After(wait + 10*time.Second):
		t.Fatal("the channel did not close after the fallback's bound")
	}
	dir := h.sessionDir("eof", "eof-busy")
	checkEOFSession(t, h, dir, "client-eof-timeout", false, ss.sent.Bytes())
	if rs := ptyEOFRecords(t, dir); len(rs) == 1 && rs[0].Attrs[vocab.AttrReason] != vocab.EOFNotTerminalBusy {
		t.Errorf("pty-eof record %v: want reason %s", rs[0].Attrs, vocab.EOFNotTerminalBusy)
	}
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

// TestPTYEOFIgnore: with PTYEOFIgnore (OpenSSH's behaviour) the EOF
// changes nothing: the shell keeps running and the record stays open until
// the client closes, with close reason client-closed.
func TestPTYEOFIgnore(t *testing.T) {
	h := newHarness(t, withPTYEOF(broker.PTYEOFIgnore))
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
