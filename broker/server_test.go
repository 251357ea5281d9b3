package broker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/launch/local"
)

// newTestServer builds a server from testConfig; it never starts a
// session.
func newTestServer(t *testing.T) *Server {
	t.Helper()
	srv, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// serveReturns runs Serve on ln and returns its error, failing the test
// if Serve is still accepting after a bound far beyond any shutdown.
func serveReturns(t *testing.T, srv *Server, ln net.Listener) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still accepting 10 s after Shutdown")
		return nil
	}
}

// TestServeAfterShutdownReturns: a SIGTERM can reach serve before Serve
// starts accepting (while the loopback guard is installed); Serve then
// closes its listener and returns ErrServerClosed at once, rather than
// accepting forever after Shutdown returned.
func TestServeAfterShutdownReturns(t *testing.T) {
	srv := newTestServer(t)
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown of a server that never served: %v", err)
	}
	if err := serveReturns(t, srv, ln); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown = %v, want ErrServerClosed", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the listener after Serve returned: Accept = %v, want it closed", err)
	}
}

// TestShutdownEndsServe: Shutdown while Serve accepts closes the listener
// and Serve returns ErrServerClosed.
func TestShutdownEndsServe(t *testing.T) {
	srv := newTestServer(t)
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// A connection answered with the server's banner: Serve is accepting.
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	banner := make([]byte, len("SSH-2.0-"))
	if _, err := conn.Read(banner); err != nil || string(banner) != "SSH-2.0-" {
		t.Fatalf("no banner from the server (%q, %v)", banner, err)
	}
	conn.Close()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve = %v, want ErrServerClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still accepting 10 s after Shutdown")
	}
}

// testConfig is a valid configuration for New.
func testConfig(t *testing.T) Config {
	t.Helper()
	signer, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "key"), "test")
	if err != nil {
		t.Fatal(err)
	}
	ak, err := parseAuthorizedKeys(gossh.MarshalAuthorizedKey(signer.PublicKey()))
	if err != nil {
		t.Fatal(err)
	}
	return Config{HostKey: signer, AuthorizedKeys: ak, Users: []string{"kali"}, Launcher: local.New(),
		CaptureRoot: t.TempDir(), Limits: DefaultLimits(), Logger: slog.New(slog.DiscardHandler)}
}

// TestConfigLimitsMustBePositive: New refuses a configuration with any
// limit at zero, or a keepalive with only one of its two settings,
// naming what is wrong; each limit at 1 is taken.
func TestConfigLimitsMustBePositive(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*Config)
		want   string // "" when taken
	}{
		{"the defaults", func(*Config) {}, ""},
		{"auth tries 0", func(c *Config) { c.Limits.MaxAuthTries = 0 }, "every limit must be positive"},
		{"login grace 0", func(c *Config) { c.Limits.LoginGrace = 0 }, "every limit must be positive"},
		{"connections 0", func(c *Config) { c.Limits.MaxConns = 0 }, "every limit must be positive"},
		{"sessions 0", func(c *Config) { c.Limits.MaxSessions = 0 }, "every limit must be positive"},
		{"sessions a connection 0", func(c *Config) { c.Limits.MaxSessionsPerConn = 0 }, "every limit must be positive"},
		{"env requests 0", func(c *Config) { c.Limits.MaxEnvRequests = 0 }, "every limit must be positive"},
		{"startups a source 0", func(c *Config) { c.Limits.PerSourceMaxStartups = 0 }, "every limit must be positive"},
		{"each at 1", func(c *Config) {
			c.Limits.MaxAuthTries, c.Limits.MaxSessions, c.Limits.MaxSessionsPerConn, c.Limits.MaxEnvRequests = 1, 1, 1, 1
			c.Limits.PerSourceMaxStartups = 1
		}, ""},
		{"keepalive without a count", func(c *Config) { c.ClientAlive = ClientAlive{Interval: time.Second} }, "both must be positive"},
		{"keepalive with a negative interval", func(c *Config) { c.ClientAlive = ClientAlive{Interval: -time.Second, CountMax: 3} }, "both must be positive"},
		{"keepalive with a negative count", func(c *Config) { c.ClientAlive = ClientAlive{CountMax: -1} }, "both must be positive"},
		{"keepalive on", func(c *Config) { c.ClientAlive = ClientAlive{Interval: time.Second, CountMax: 1} }, ""},
		{"keepalive off, a count alone", func(c *Config) { c.ClientAlive = ClientAlive{CountMax: 3} }, ""},
	} {
		cfg := testConfig(t)
		tt.change(&cfg)
		_, err := New(cfg)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: New = %v, want %q", tt.name, err, tt.want)
		}
	}
}
