package broker

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestMaxStartupsDrop(t *testing.T) {
	openssh := MaxStartups{Start: 10, Rate: 30, Full: 100}
	hard := MaxStartups{Start: 5, Rate: 100, Full: 5}
	tests := []struct {
		name     string
		m        MaxStartups
		unauth   int
		roll     int  // what the injected randomness returns
		want     bool // refused
		wantRoll bool // whether chance was consulted at all
	}{
		{"none open", openssh, 0, 0, false, false},
		{"below start", openssh, 9, 0, false, false},
		{"at start, roll under rate", openssh, 10, 29, true, true},
		{"at start, roll at rate", openssh, 10, 30, false, true},
		// 30 + 70*(55-10)/(100-10) = 65
		{"midway, roll under 65", openssh, 55, 64, true, true},
		{"midway, roll at 65", openssh, 55, 65, false, true},
		// 30 + 70*98/90 = 99: the last step before full still leaves a chance
		{"one below full, roll 99", openssh, 99, 99, false, true},
		{"at full", openssh, 100, 99, true, false},
		{"above full", openssh, 150, 99, true, false},
		{"hard limit below", hard, 4, 0, false, false},
		{"hard limit at", hard, 5, 99, true, false},
		{"rate 100 between start and full", MaxStartups{Start: 2, Rate: 100, Full: 8}, 3, 99, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rolled := false
			got := tt.m.drop(tt.unauth, func() int { rolled = true; return tt.roll })
			if got != tt.want || rolled != tt.wantRoll {
				t.Errorf("drop(%d) with %s and roll %d = %v (rolled %v), want %v (rolled %v)",
					tt.unauth, tt.m, tt.roll, got, rolled, tt.want, tt.wantRoll)
			}
		})
	}
}

func TestParseMaxStartups(t *testing.T) {
	good := map[string]MaxStartups{
		"10:30:100": {10, 30, 100},
		" 16:30:32": {16, 30, 32},
		"10":        {10, 100, 10},
		"5:1:5":     {5, 1, 5},
	}
	for in, want := range good {
		if got, err := ParseMaxStartups(in); err != nil || got != want {
			t.Errorf("ParseMaxStartups(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":            "not start:rate:full",
		"ten":         "not start:rate:full",
		"10:30":       "not start:rate:full",
		"1:2:3:4":     "not start:rate:full",
		"10:30:x":     "not start:rate:full",
		"0:30:10":     "at least 1",
		"-1":          "at least 1",
		"20:30:10":    "start must not exceed full",
		"10:0:100":    "rate must be a percentage",
		"10:101:100":  "rate must be a percentage",
		"10:-30:100":  "rate must be a percentage",
		"10:30:-100":  "at least 1",
		"10 : 30:100": "not start:rate:full",
	}
	for in, want := range bad {
		if _, err := ParseMaxStartups(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseMaxStartups(%q) err = %v, want it to contain %q", in, err, want)
		}
	}
}

// testGate is a gate without chance: its roll always says "keep". No
// address is local to it, so every address is a source of its own.
func testGate(maxConns, perSource int, m MaxStartups) *preauthGate {
	g := newPreauthGate(Limits{MaxConns: maxConns, PerSourceMaxStartups: perSource, MaxStartups: m},
		func(netip.Addr) bool { return false })
	g.roll = func() int { return 99 }
	return g
}

// admitConn admits a connection from source, keyed as the listener keys
// it, or returns the refusal.
func admitConn(t *testing.T, g *preauthGate, source string) (*gatedConn, string) {
	t.Helper()
	key := g.keyOf(sourceOf(&net.TCPAddr{IP: net.ParseIP(source), Port: 40000}))
	if reason := g.admit(key); reason != "" {
		return nil, reason
	}
	c, peer := net.Pipe()
	t.Cleanup(func() { c.Close(); peer.Close() })
	return &gatedConn{Conn: c, gate: g, source: key, pending: true}, ""
}

func TestPreauthGatePerSource(t *testing.T) {
	g := testGate(100, 2, MaxStartups{Start: 50, Rate: 30, Full: 50})
	a1, _ := admitConn(t, g, "127.0.0.2")
	a2, _ := admitConn(t, g, "127.0.0.2")
	if _, reason := admitConn(t, g, "127.0.0.2"); reason != refusedPerSource {
		t.Fatalf("third connection from one source: refusal %q, want %q", reason, refusedPerSource)
	}
	if _, reason := admitConn(t, g, "::ffff:127.0.0.2"); reason != refusedPerSource {
		t.Errorf("the same address as IPv4-mapped IPv6 counted as another source: %q", reason)
	}
	if _, reason := admitConn(t, g, "127.0.0.1"); reason != "" {
		t.Fatalf("another source was refused: %q", reason)
	}
	// An authenticated connection leaves its source's count.
	a1.markAuthenticated()
	a1.markAuthenticated() // twice counts once
	if _, reason := admitConn(t, g, "127.0.0.2"); reason != "" {
		t.Fatalf("after one authenticated, a new connection was refused: %q", reason)
	}
	// So does one that closes before authenticating.
	a2.Close()
	a2.Close()
	if _, reason := admitConn(t, g, "127.0.0.2"); reason != "" {
		t.Fatalf("after one closed, a new connection was refused: %q", reason)
	}
	// Closing an authenticated connection does not settle it a second time.
	a1.Close()
	if got := g.unauthenticated(); got != 3 {
		t.Errorf("unauthenticated = %d, want 3 (two from 127.0.0.2, one from 127.0.0.1)", got)
	}
}

func TestPreauthGateTotalAndConnLimits(t *testing.T) {
	g := testGate(4, 3, MaxStartups{Start: 2, Rate: 30, Full: 3})
	var conns []*gatedConn
	for _, src := range []string{"10.0.0.1", "10.0.0.2"} {
		c, reason := admitConn(t, g, src)
		if reason != "" {
			t.Fatalf("%s refused below start: %q", src, reason)
		}
		conns = append(conns, c)
	}
	// From start on chance decides; this gate's roll keeps the connection.
	c, reason := admitConn(t, g, "10.0.0.3")
	if reason != "" {
		t.Fatalf("refused at start with a keeping roll: %q", reason)
	}
	conns = append(conns, c)
	if _, reason := admitConn(t, g, "10.0.0.4"); reason != refusedMaxStartup {
		t.Fatalf("at full: refusal %q, want %q", reason, refusedMaxStartup)
	}
	// Authenticated connections free pre-authentication slots but still
	// count against MaxConns.
	for _, c := range conns {
		c.markAuthenticated()
	}
	if _, reason := admitConn(t, g, "10.0.0.4"); reason != "" {
		t.Fatalf("after authentication: refusal %q", reason)
	}
	if _, reason := admitConn(t, g, "10.0.0.5"); reason != refusedConnLimit {
		t.Fatalf("at MaxConns: refusal %q, want %q", reason, refusedConnLimit)
	}
	conns[0].Close()
	if _, reason := admitConn(t, g, "10.0.0.5"); reason != "" {
		t.Fatalf("after a close: refusal %q", reason)
	}
}

func TestLimitsCheckPreauth(t *testing.T) {
	for _, tt := range []struct {
		change func(*Limits)
		want   string
	}{
		{func(l *Limits) { l.MaxStartups = MaxStartups{Start: 16, Rate: 30, Full: 64} }, "must be below max conns"},
		{func(l *Limits) { l.PerSourceMaxStartups = 33 }, "must not exceed max startups full"},
		{func(l *Limits) { l.MaxStartups.Rate = 0 }, "rate must be a percentage"},
	} {
		l := DefaultLimits()
		tt.change(&l)
		if err := l.checkPreauth(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err = %v, want %q", l, err, tt.want)
		}
	}
	if err := DefaultLimits().checkPreauth(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
