package main

import (
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestParseServeConfigClientAlive: --client-alive-interval and
// --client-alive-count-max (and their APTL_CAPTURE_* names) default to
// 15s x 3, 0 turns probing off, the flag wins over the environment, and
// out-of-range values are refused naming the flag and the env var.
func TestParseServeConfigClientAlive(t *testing.T) {
	c, err := parseServeConfig(nil, testutil.MapLookup(nil))
	if err != nil || c.clientAlive != (broker.ClientAlive{Interval: 15 * time.Second, CountMax: 3}) {
		t.Fatalf("default: %+v, %v; want 15s x 3", c.clientAlive, err)
	}
	env := testutil.MapLookup(map[string]string{"APTL_CAPTURE_CLIENT_ALIVE_INTERVAL": "0", "APTL_CAPTURE_CLIENT_ALIVE_COUNT_MAX": "5"})
	if c, err = parseServeConfig(nil, env); err != nil || c.clientAlive != (broker.ClientAlive{CountMax: 5}) {
		t.Fatalf("env 0 x 5: %+v, %v", c.clientAlive, err)
	}
	if c, err = parseServeConfig([]string{"--client-alive-interval", "30s"}, env); err != nil || c.clientAlive.Interval != 30*time.Second {
		t.Fatalf("flag over env: %+v, %v", c.clientAlive, err)
	}
	for _, bad := range []struct{ name, env, value string }{
		{"client-alive-interval", "APTL_CAPTURE_CLIENT_ALIVE_INTERVAL", "500ms"},
		{"client-alive-interval", "APTL_CAPTURE_CLIENT_ALIVE_INTERVAL", "2h"},
		{"client-alive-interval", "APTL_CAPTURE_CLIENT_ALIVE_INTERVAL", "-1s"},
		{"client-alive-count-max", "APTL_CAPTURE_CLIENT_ALIVE_COUNT_MAX", "0"},
		{"client-alive-count-max", "APTL_CAPTURE_CLIENT_ALIVE_COUNT_MAX", "101"},
	} {
		_, err := parseServeConfig(nil, testutil.MapLookup(map[string]string{bad.env: bad.value}))
		if err == nil || !strings.Contains(err.Error(), "--"+bad.name+" / "+bad.env) {
			t.Errorf("%s=%s: %v, want an error naming --%s / %s", bad.env, bad.value, err, bad.name, bad.env)
		}
	}
}
