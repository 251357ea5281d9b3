// Package testutil holds the helpers the tests of several packages share:
// bounded waits, a log buffer, an environment from a map, fd and goroutine
// leak checks, session pipes and PTY output, and raw agent-protocol records.
// Only tests import it.
package testutil

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// FailAfter bounds how long a test waits for a child before failing; it is a
// failure deadline, never a way to let something happen.
const FailAfter = 15 * time.Second

// LockedBuffer collects a server's logs for assertions; safe for concurrent use.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Reset empties the buffer.
func (b *LockedBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// MapLookup looks environment variables up in m instead of the process's
// environment: a cliconfig.Lookup for the commands' settings tests.
func MapLookup(m map[string]string) func(name string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// WriteFixture writes content to a file name in a fresh temporary folder
// and returns its path.
func WriteFixture(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// WaitUntil polls cond until it holds or FailAfter passes, and reports
// whether it held: for what another goroutine does after the call a test
// can observe (a log line written after a connection closed).
func WaitUntil(cond func() bool) bool {
	for deadline := time.Now().Add(FailAfter); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// ClosingListener listens on a loopback TCP port and closes every
// connection it accepts, until the test ends: a port a test's process can
// connect to (a connect the witnesses record). It returns the address.
func ClosingListener(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}
