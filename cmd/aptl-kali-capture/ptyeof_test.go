package main

import (
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestParseServeConfigPTYEOF: --pty-eof / APTL_CAPTURE_PTY_EOF defaults to
// eof with a 2 s --pty-eof-wait, takes hangup and ignore, the flag wins
// over the environment, and a bad value is refused naming both spellings.
func TestParseServeConfigPTYEOF(t *testing.T) {
	c, err := parseServeConfig(nil, testutil.MapLookup(nil))
	if err != nil || c.ptyEOF != broker.PTYEOFChar || c.ptyEOFWait != broker.DefaultPTYEOFWait {
		t.Fatalf("default: %v, wait %v, %v; want eof, %v", c.ptyEOF, c.ptyEOFWait, err, broker.DefaultPTYEOFWait)
	}
	hangup := testutil.MapLookup(map[string]string{"APTL_CAPTURE_PTY_EOF": "hangup"})
	if c, err = parseServeConfig(nil, hangup); err != nil || c.ptyEOF != broker.PTYEOFHangup {
		t.Fatalf("env hangup: %v, %v", c.ptyEOF, err)
	}
	if c, err = parseServeConfig([]string{"--pty-eof", "ignore"}, hangup); err != nil || c.ptyEOF != broker.PTYEOFIgnore {
		t.Fatalf("flag over env: %v, %v", c.ptyEOF, err)
	}
	if c, err = parseServeConfig([]string{"--pty-eof", "eof", "--pty-eof-wait", "5s"}, hangup); err != nil || c.ptyEOF != broker.PTYEOFChar || c.ptyEOFWait != 5*time.Second {
		t.Fatalf("eof, 5s: %v, %v, %v", c.ptyEOF, c.ptyEOFWait, err)
	}
	for _, bad := range []string{"0s", "50ms", "2m"} {
		if _, err := parseServeConfig([]string{"--pty-eof-wait", bad}, testutil.MapLookup(nil)); err == nil || !strings.Contains(err.Error(), "--pty-eof-wait / APTL_CAPTURE_PTY_EOF_WAIT") {
			t.Errorf("--pty-eof-wait %s: %v, want refused naming the setting", bad, err)
		}
	}
	_, err = parseServeConfig(nil, testutil.MapLookup(map[string]string{"APTL_CAPTURE_PTY_EOF": "close"}))
	if err == nil || !strings.Contains(err.Error(), "--pty-eof / APTL_CAPTURE_PTY_EOF") || !strings.Contains(err.Error(), `"close"`) {
		t.Fatalf("bad value: %v, want an error naming the flag, the env var and the value", err)
	}
}
