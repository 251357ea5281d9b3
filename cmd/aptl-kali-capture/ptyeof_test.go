package main

import (
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestParseServeConfigPTYEOF: --pty-eof / APTL_CAPTURE_PTY_EOF defaults to
// ignore (OpenSSH's behaviour), takes hangup, the flag wins over the
// environment, and a bad value is refused naming both spellings.
func TestParseServeConfigPTYEOF(t *testing.T) {
	c, err := parseServeConfig(nil, testutil.MapLookup(nil))
	if err != nil || c.ptyEOF != broker.PTYEOFIgnore {
		t.Fatalf("default: %v, %v; want ignore", c.ptyEOF, err)
	}
	hangup := testutil.MapLookup(map[string]string{"APTL_CAPTURE_PTY_EOF": "hangup"})
	if c, err = parseServeConfig(nil, hangup); err != nil || c.ptyEOF != broker.PTYEOFHangup {
		t.Fatalf("env hangup: %v, %v", c.ptyEOF, err)
	}
	if c, err = parseServeConfig([]string{"--pty-eof", "ignore"}, hangup); err != nil || c.ptyEOF != broker.PTYEOFIgnore {
		t.Fatalf("flag over env: %v, %v", c.ptyEOF, err)
	}
	_, err = parseServeConfig(nil, testutil.MapLookup(map[string]string{"APTL_CAPTURE_PTY_EOF": "close"}))
	if err == nil || !strings.Contains(err.Error(), "--pty-eof / APTL_CAPTURE_PTY_EOF") || !strings.Contains(err.Error(), `"close"`) {
		t.Fatalf("bad value: %v, want an error naming the flag, the env var and the value", err)
	}
}
