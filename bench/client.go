package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// opTimeout bounds every single operation of the Go client: a dial, a
// command's round trip, a bulk transfer.
const opTimeout = 2 * time.Minute

// dial connects and authenticates as the login user, the host key pinned.
func dial(t *target, login string, key gossh.Signer) (*gossh.Client, error) {
	return gossh.Dial("tcp", t.addr, &gossh.ClientConfig{
		User:            login,
		Auth:            []gossh.AuthMethod{gossh.PublicKeys(key)},
		HostKeyCallback: gossh.FixedHostKey(t.hostKey),
		Timeout:         10 * time.Second,
	})
}

// shell is a persistent PTY shell, as the tool servers keep one: commands
// are written delimiter-wrapped and their end marker awaited.
type shell struct {
	sess  *gossh.Session
	stdin io.WriteCloser
	out   io.Reader
	buf   []byte // received and not yet matched
	next  int
}

// openShell opens a session with the env, pty-req and shell requests a tool
// server sends (TERM xterm, 80x24).
func openShell(c *gossh.Client, sessionID string) (*shell, error) {
	sess, err := c.NewSession()
	if err != nil {
		return nil, err
	}
	sh := &shell{sess: sess}
	if err := sess.Setenv("APTL_SESSION_ID", sessionID); err != nil {
		// sshd refuses env names it does not accept with an error reply;
		// both sshd configs here accept APTL_*.
		sess.Close()
		return nil, fmt.Errorf("env: %w", err)
	}
	if err := sess.RequestPty("xterm", 24, 80, nil); err != nil {
		sess.Close()
		return nil, err
	}
	if sh.stdin, err = sess.StdinPipe(); err != nil {
		sess.Close()
		return nil, err
	}
	if sh.out, err = sess.StdoutPipe(); err != nil {
		sess.Close()
		return nil, err
	}
	if err := sess.Shell(); err != nil {
		sess.Close()
		return nil, err
	}
	return sh, nil
}

// run types `true` wrapped in delimiters and returns when its end marker
// with status 0 has arrived. The marker is typed inside quotes, so the
// terminal's echo of the line never matches it.
func (sh *shell) run() (time.Duration, error) {
	sh.next++
	marker := fmt.Appendf(nil, "B_END_%d:0", sh.next)
	start := time.Now()
	if _, err := fmt.Fprintf(sh.stdin, "echo \"B_START_%d\"; true; echo \"B_END_%d:$?\"\n", sh.next, sh.next); err != nil {
		return 0, err
	}
	chunk := make([]byte, 4096)
	for !bytes.Contains(sh.buf, marker) {
		n, err := sh.out.Read(chunk)
		sh.buf = append(sh.buf, chunk[:n]...)
		if err != nil {
			return 0, fmt.Errorf("shell output ended before the marker: %w", err)
		}
	}
	elapsed := time.Since(start)
	sh.buf = sh.buf[:0]
	return elapsed, nil
}

// close exits the shell and waits (bounded) for the session to end, so
// that each server has finished with it, and its record, before the next
// measurement.
func (sh *shell) close() {
	io.WriteString(sh.stdin, "exit\n")
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, sh.out); sh.sess.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	sh.sess.Close()
}

// withTimeout runs f and closes c if f has not returned within opTimeout,
// which makes any blocked read or write in f fail.
func withTimeout(c *gossh.Client, f func() error) error {
	timer := time.AfterFunc(opTimeout, func() { c.Close() })
	err := f()
	if !timer.Stop() {
		return errors.Join(err, fmt.Errorf("timed out after %v", opTimeout))
	}
	return err
}

// countWriter counts the bytes written to it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }
