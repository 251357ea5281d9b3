package broker

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
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
// address is local to it, so every address is a source of its own. Its
// clock stands still, so no connection ever becomes old enough to evict
// unless a test moves it (evictionGate).
func testGate(maxConns, perSource int, m MaxStartups) *preauthGate {
	g := newPreauthGate(Limits{MaxConns: maxConns, PerSourceMaxStartups: perSource, MaxStartups: m, PreauthEvictAfter: 2 * time.Second},
		func(netip.Addr) bool { return false })
	g.roll = func() int { return 99 }
	clock := time.Unix(1000, 0)
	g.now = func() time.Time { return clock }
	return g
}

// admitConn admits a connection from source, keyed as the listener keys
// it, or returns the refusal.
func admitConn(t *testing.T, g *preauthGate, source string) (*gatedConn, string) {
	t.Helper()
	c, peer := net.Pipe()
	t.Cleanup(func() { c.Close(); peer.Close() })
	gc := &gatedConn{Conn: c, gate: g, source: g.keyOf(sourceOf(&net.TCPAddr{IP: net.ParseIP(source), Port: 40000}))}
	if evicted, reason := g.admit(gc); reason != "" || evicted != nil {
		if evicted != nil {
			t.Fatalf("admitting a connection from %s evicted one from %v", source, evicted.conn.source)
		}
		return nil, reason
	}
	return gc, ""
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
		{func(l *Limits) { l.PreauthEvictAfter = 0 }, "evict after"},
		{func(l *Limits) { l.PreauthEvictAfter = l.LoginGrace + 1 }, "at most the login grace"},
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

// evictionGate is testGate with a clock the test moves.
func evictionGate(maxConns, perSource int, m MaxStartups) (*preauthGate, *time.Time) {
	g := testGate(maxConns, perSource, m)
	clock := time.Unix(1000, 0)
	g.now = func() time.Time { return clock }
	return g, &clock
}

// tryConn offers a connection from source and returns it (nil if refused),
// the refusal, and the connection it took the place of.
func tryConn(t *testing.T, g *preauthGate, source string) (*gatedConn, string, *eviction) {
	t.Helper()
	c, peer := net.Pipe()
	t.Cleanup(func() { c.Close(); peer.Close() })
	gc := &gatedConn{Conn: c, gate: g, source: g.keyOf(sourceOf(&net.TCPAddr{IP: net.ParseIP(source), Port: 40000}))}
	evicted, reason := g.admit(gc)
	if reason != "" {
		return nil, reason, evicted
	}
	return gc, "", evicted
}

// TestPreauthEvictsOldestOfFullSource: a source at its limit gets a new
// connection in by giving up its oldest, once that one has been
// unauthenticated for evictAfter, never sooner; the one given up counts no
// more, and its own later Close or authentication changes nothing.
func TestPreauthEvictsOldestOfFullSource(t *testing.T) {
	g, clock := evictionGate(100, 3, MaxStartups{Start: 50, Rate: 30, Full: 50})
	var held []*gatedConn
	for _, at := range []time.Duration{0, time.Second, 1500 * time.Millisecond} {
		*clock = time.Unix(1000, 0).Add(at)
		c, reason, _ := tryConn(t, g, "192.0.2.1")
		if reason != "" {
			t.Fatalf("connection at %v refused: %q", at, reason)
		}
		held = append(held, c)
	}
	*clock = time.Unix(1000, 0).Add(1999 * time.Millisecond)
	if _, reason, ev := tryConn(t, g, "192.0.2.1"); reason != refusedPerSource || ev != nil {
		t.Fatalf("the oldest is 1.999 s old: refusal %q, eviction %v; want the per-source refusal and none", reason, ev)
	}
	*clock = time.Unix(1000, 0).Add(2 * time.Second)
	newest, reason, ev := tryConn(t, g, "192.0.2.1")
	if reason != "" || ev == nil || ev.conn != held[0] || ev.reason != refusedPerSource || ev.age != 2*time.Second {
		t.Fatalf("the oldest is 2 s old: refusal %q, eviction %+v; want the oldest evicted under the per-source limit", reason, ev)
	}
	if got := g.unauthenticated(); got != 3 {
		t.Fatalf("unauthenticated = %d after an eviction, want 3", got)
	}
	held[0].markAuthenticated()
	held[0].Close()
	if got := g.unauthenticated(); got != 3 || g.conns != 3 {
		t.Fatalf("the evicted connection's authentication and Close settled it again: unauthenticated %d, conns %d", g.unauthenticated(), g.conns)
	}
	// The next oldest is 1 s old now: refused again.
	if _, reason, _ := tryConn(t, g, "192.0.2.1"); reason != refusedPerSource {
		t.Fatalf("with the rest younger than evictAfter: %q", reason)
	}
	// An authenticated connection is nobody's victim.
	held[1].markAuthenticated()
	held[2].markAuthenticated()
	newest.markAuthenticated()
	*clock = clock.Add(time.Hour)
	for range 3 {
		if _, reason, ev := tryConn(t, g, "192.0.2.1"); reason != "" || ev != nil {
			t.Fatalf("after authentication: refusal %q, eviction %v", reason, ev)
		}
	}
	if g.conns != 6 {
		t.Fatalf("conns = %d, want 6 (3 authenticated, 3 new)", g.conns)
	}
}

// TestPreauthEvictsFromBusiestSource: at max-startups' full a newcomer
// takes the place of the oldest connection of the source holding the
// most, if that source holds more than the newcomer's; between sources
// holding as many, the one whose oldest is older gives it up.
func TestPreauthEvictsFromBusiestSource(t *testing.T) {
	g, clock := evictionGate(100, 4, MaxStartups{Start: 6, Rate: 100, Full: 6})
	at := func(d time.Duration) { *clock = time.Unix(1000, 0).Add(d) }
	conns := map[string][]*gatedConn{}
	open := func(src string) {
		t.Helper()
		c, reason, ev := tryConn(t, g, src)
		if reason != "" || ev != nil {
			t.Fatalf("filling from %s: refusal %q, eviction %v", src, reason, ev)
		}
		conns[src] = append(conns[src], c)
	}
	at(0)
	open("192.0.2.1")
	open("192.0.2.1")
	open("192.0.2.2")
	open("192.0.2.2")
	at(100 * time.Millisecond)
	open("192.0.2.1")
	open("192.0.2.3")
	// Full (6): .1 holds 3, .2 holds 2, .3 holds 1. Nothing is old yet.
	at(time.Second)
	if _, reason, ev := tryConn(t, g, "192.0.2.9"); reason != refusedMaxStartup || ev != nil {
		t.Fatalf("full of young connections: refusal %q, eviction %v", reason, ev)
	}
	at(3 * time.Second)
	_, reason, ev := tryConn(t, g, "192.0.2.9")
	if reason != "" || ev == nil || ev.conn != conns["192.0.2.1"][0] || ev.reason != refusedMaxStartup {
		t.Fatalf("a fresh source at full: refusal %q, eviction %+v; want .1's oldest evicted", reason, ev)
	}
	// Now .1 and .2 hold 2 each, .3 and .9 hold 1: a newcomer from .3
	// takes from a source holding 2.
	_, reason, ev = tryConn(t, g, "192.0.2.3")
	if reason != "" || ev == nil || (ev.conn.source != conns["192.0.2.1"][0].source && ev.conn.source != conns["192.0.2.2"][0].source) {
		t.Fatalf("a source holding 1 at full: refusal %q, eviction %+v; want one of a source holding 2", reason, ev)
	}
	// Every source now holds at most as many as .3 (2): a newcomer from .3
	// takes from nobody.
	if _, reason, ev := tryConn(t, g, "192.0.2.3"); reason != refusedMaxStartup || ev != nil {
		t.Fatalf("the busiest source's own newcomer: refusal %q, eviction %v; want the refusal", reason, ev)
	}
}

// TestPreauthEvictionTieTakesOldest: between two sources holding as many,
// the one whose oldest connection is older gives it up, whichever of them
// the scan meets first (the sources are a map: each round is another
// order, and 32 rounds meet both).
//
// Equivalent mutant (gremlins): preauth.go busiestEvictableLocked's
// `e.age > best.age` -> `>=`: between two oldest connections of the same
// age, either is the right one to evict.
func TestPreauthEvictionTieTakesOldest(t *testing.T) {
	for range 32 {
		g, clock := evictionGate(100, 4, MaxStartups{Start: 4, Rate: 100, Full: 4})
		var first *gatedConn
		for i, src := range []string{"192.0.2.2", "192.0.2.1", "192.0.2.1", "192.0.2.2"} {
			*clock = time.Unix(1000, 0).Add(time.Duration(i) * 100 * time.Millisecond)
			c, reason, _ := tryConn(t, g, src)
			if reason != "" {
				t.Fatal(reason)
			}
			if i == 0 {
				first = c
			}
		}
		*clock = time.Unix(1000, 0).Add(10 * time.Second)
		if _, _, ev := tryConn(t, g, "192.0.2.7"); ev == nil || ev.conn != first {
			t.Fatalf("tie: evicted %+v, want the oldest connection of all (.2's first)", ev)
		}
	}
}

// TestPreauthEarlyDropEvictsInstead: between start and full, where chance
// says refuse, a newcomer from a lighter source takes an old connection's
// place instead; with no such connection it is refused as before.
func TestPreauthEarlyDropEvictsInstead(t *testing.T) {
	g, clock := evictionGate(100, 8, MaxStartups{Start: 2, Rate: 30, Full: 10})
	for range 3 {
		if _, reason, _ := tryConn(t, g, "192.0.2.1"); reason != "" {
			t.Fatal(reason)
		}
	}
	g.roll = func() int { return 0 } // chance always refuses
	if _, reason, ev := tryConn(t, g, "192.0.2.5"); reason != refusedMaxStartup || ev != nil {
		t.Fatalf("young connections only: refusal %q, eviction %v", reason, ev)
	}
	*clock = clock.Add(5 * time.Second)
	if _, reason, ev := tryConn(t, g, "192.0.2.5"); reason != "" || ev == nil || ev.reason != refusedMaxStartup {
		t.Fatalf("old connections from a busier source: refusal %q, eviction %+v", reason, ev)
	}
	if got := g.unauthenticated(); got != 3 {
		t.Fatalf("unauthenticated = %d, want 3", got)
	}
}

// TestPreauthEvictionsBounded: a flood of newcomers from many sources, one
// every millisecond for 60 s, evicts at most (Full + perSource) connections
// per evictAfter, and never one younger than evictAfter.
func TestPreauthEvictionsBounded(t *testing.T) {
	l := DefaultLimits()
	g, clock := evictionGate(l.MaxConns, l.PerSourceMaxStartups, l.MaxStartups)
	g.roll = func() int { return 0 }
	start := *clock
	evictions := 0
	for i := range 60000 {
		*clock = start.Add(time.Duration(i) * time.Millisecond)
		_, _, ev := tryConn(t, g, "198.18.0."+strconv.Itoa(1+i%200))
		if ev != nil {
			evictions++
			if ev.age < l.PreauthEvictAfter {
				t.Fatalf("evicted a connection %v old", ev.age)
			}
		}
	}
	bound := (l.MaxStartups.Full + l.PerSourceMaxStartups) * int(60*time.Second/l.PreauthEvictAfter+1)
	t.Logf("%d evictions in 60 s of one newcomer a millisecond; bound %d", evictions, bound)
	if evictions == 0 || evictions > bound {
		t.Fatalf("%d evictions, want some and at most %d", evictions, bound)
	}
}
