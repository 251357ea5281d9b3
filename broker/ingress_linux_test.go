package broker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// guardedListener listens on loopback with a guard whose sources are the
// given ones instead of the namespace's.
func guardedListener(t *testing.T, network, addr string, s guardSources) (net.Listener, *loopbackGuard) {
	t.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		t.Skipf("no %s loopback here: %v", network, err)
	}
	t.Cleanup(func() { ln.Close() })
	tcp := ln.(*net.TCPListener)
	raw, err := tcp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	g := &loopbackGuard{raw: raw, log: slog.New(slog.DiscardHandler), sources: func() (guardSources, error) { return s, nil }}
	if err := g.refresh(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln, g
}

// dialFrom connects from source to ln; a guarded-out SYN gets no answer, so
// the dial times out.
func dialFrom(ln net.Listener, source string) error {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 400 * time.Millisecond}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err == nil {
		c.Close()
	}
	return err
}

func loopbackIndex(t *testing.T) int {
	t.Helper()
	s, err := namespaceSources()
	if err != nil {
		t.Fatal(err)
	}
	return s.loopbackIndex
}

// TestLoopbackGuardDropsOtherSources: through loopback only the listed
// sources get a handshake; one not listed gets no answer at all (no reset,
// no SYN-ACK), which is what a forged source through loopback gets.
func TestLoopbackGuardDropsOtherSources(t *testing.T) {
	lo := loopbackIndex(t)
	ln, _ := guardedListener(t, "tcp4", "127.0.0.1:0", guardSources{loopbackIndex: lo,
		v4: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("127.0.1.0/24")}})
	for _, ok := range []string{"127.0.0.1", "127.0.1.7", "127.0.1.255"} {
		if err := dialFrom(ln, ok); err != nil {
			t.Errorf("a listed source %s was not let through: %v", ok, err)
		}
	}
	for _, dropped := range []string{"127.0.0.2", "127.0.2.1", "127.1.0.1"} {
		err := dialFrom(ln, dropped)
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("a source not listed (%s): %v, want a timeout (the SYN dropped without an answer)", dropped, err)
		}
	}
}

// TestLoopbackGuardIPv6: IPv6 sources are compared whole; an IPv6 socket's
// IPv4 traffic goes by the IPv4 list.
func TestLoopbackGuardIPv6(t *testing.T) {
	lo := loopbackIndex(t)
	// Whether this namespace has IPv6 loopback is asked of a listener
	// without a guard: a guard that drops ::1 must fail the test, not
	// skip it.
	var plain net.ListenConfig
	probe, err := plain.Listen(context.Background(), "tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	if err := dialFrom(probe, "::1"); err != nil {
		probe.Close()
		t.Skipf("no IPv6 loopback: %v", err)
	}
	probe.Close()
	ln, _ := guardedListener(t, "tcp", "[::]:0", guardSources{loopbackIndex: lo,
		v4: []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")}, v6: []netip.Addr{netip.MustParseAddr("::1")}})
	port := ln.Addr().(*net.TCPAddr).Port
	dial := func(from, to string) error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 400 * time.Millisecond}
		c, err := d.Dial("tcp", net.JoinHostPort(to, strconv.Itoa(port)))
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial("::1", "::1"); err != nil {
		t.Errorf("IPv6 source listed (::1) was dropped: %v", err)
	}
	if err := dial("127.0.0.3", "127.0.0.1"); err != nil {
		t.Errorf("IPv4 source listed, through a dual-stack listener: %v", err)
	}
	if err := dial("127.0.0.4", "127.0.0.1"); err == nil {
		t.Errorf("IPv4 source not listed was let through a dual-stack listener")
	}
	// The IPv6 list without ::1: its own SYN is dropped (with an IPv4
	// list of some length, so an IPv6 segment must jump past it whole).
	ln2, _ := guardedListener(t, "tcp6", "[::1]:0", guardSources{loopbackIndex: lo,
		v4: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("127.0.1.0/24")}, v6: []netip.Addr{netip.MustParseAddr("fd00::1")}})
	if err := dialFrom(ln2, "::1"); err == nil {
		t.Errorf("::1 not listed was let through")
	}
}

// TestLoopbackGuardRefreshReplaces: a refresh with other sources replaces
// the filter; one with the same sources leaves it.
func TestLoopbackGuardRefreshReplaces(t *testing.T) {
	lo := loopbackIndex(t)
	s := guardSources{loopbackIndex: lo, v4: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	ln, g := guardedListener(t, "tcp4", "127.0.0.1:0", s)
	if err := dialFrom(ln, "127.0.0.5"); err == nil {
		t.Fatal("127.0.0.5 let through before it was listed")
	}
	s2 := guardSources{loopbackIndex: lo, v4: append(s.v4, netip.MustParsePrefix("127.0.0.5/32"))}
	g.sources = func() (guardSources, error) { return s2, nil }
	if err := g.refresh(); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom(ln, "127.0.0.5"); err != nil {
		t.Fatalf("127.0.0.5 listed by the refresh, still dropped: %v", err)
	}
	g.sources = func() (guardSources, error) { return guardSources{}, errors.New("netlink: no buffer space") }
	if err := g.refresh(); err == nil {
		t.Fatal("a failed address read was not reported")
	}
	if err := dialFrom(ln, "127.0.0.5"); err != nil {
		t.Fatalf("a failed refresh lost the last filter: %v", err)
	}
}

// TestNamespaceSources: the namespace's list holds the loopback device,
// 127.0.0.0/8, ::1 and each interface address once.
func TestNamespaceSources(t *testing.T) {
	s, err := namespaceSources()
	if err != nil {
		t.Fatal(err)
	}
	if s.v4[0] != netip.MustParsePrefix("127.0.0.0/8") {
		t.Errorf("first IPv4 source %v, want 127.0.0.0/8", s.v4[0])
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range interfaceAddrs(addrs) {
		switch {
		case a.IsLoopback():
		case a.Is4() && !slices.Contains(s.v4, netip.PrefixFrom(a, 32)):
			t.Errorf("interface address %v missing", a)
		case a.Is6() && !slices.Contains(s.v6, a):
			t.Errorf("interface address %v missing", a)
		}
	}
	if _, err := guardProgram(s); err != nil {
		t.Errorf("this namespace's program: %v", err)
	}
}

// TestGuardProgramBounds: the lists are bounded before the kernel sees them,
// and trimmed cuts them to the bound, saying how many it cut.
func TestGuardProgramBounds(t *testing.T) {
	var s guardSources
	s.loopbackIndex = 1
	for i := range guardMaxV4 + 5 {
		s.v4 = append(s.v4, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 32))
	}
	for i := range guardMaxV6 + 3 {
		s.v6 = append(s.v6, netip.AddrFrom16([16]byte{0xfd, 15: byte(i)}))
	}
	if _, err := guardProgram(s); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("over the bounds: %v", err)
	}
	tr, cut := s.trimmed()
	if cut != 8 || len(tr.v4) != guardMaxV4 || len(tr.v6) != guardMaxV6 {
		t.Fatalf("trimmed: cut %d, %d and %d left", cut, len(tr.v4), len(tr.v6))
	}
	prog, err := guardProgram(tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(prog) >= 4096 {
		t.Fatalf("the largest program has %d instructions; the kernel takes at most 4095", len(prog))
	}
	// The kernel takes the largest program.
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	raw, _ := ln.(*net.TCPListener).SyscallConn()
	var aerr error
	raw.Control(func(fd uintptr) { aerr = attachGuard(int(fd), tr) })
	if aerr != nil {
		t.Fatalf("the kernel refused the largest program: %v", aerr)
	}
}

// Equivalent mutants (gremlins): ingress_linux.go trimmed's `n >
// guardMaxV4` and `n > guardMaxV6` -> `>=` (cutting a list at the length
// it has, and counting 0), and refresh's `g.last.loopbackIndex != 0` ->
// `== 0` (attaching the same filter again changes nothing a connection
// sees).

// TestGuardListenerGuardsTCP: a TCP listener gets a guard, with the
// namespace's sources in its filter; a listener of another kind none.
func TestGuardListenerGuardsTCP(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g, err := guardListener(ln, slog.New(slog.DiscardHandler))
	if err != nil || g == nil || g.last.loopbackIndex == 0 {
		t.Fatalf("guardListener of a TCP listener = %v, %v; want a guard with the namespace's sources", g, err)
	}
	unixLn, err := net.Listen("unix", t.TempDir()+"/s")
	if err != nil {
		t.Fatal(err)
	}
	defer unixLn.Close()
	if g, err := guardListener(unixLn, slog.New(slog.DiscardHandler)); g != nil || err != nil {
		t.Errorf("guardListener of a Unix listener = %v, %v; want none", g, err)
	}
}

// TestGuardSourcesEqual: two source lists are the same only with the same
// loopback device and the same addresses.
func TestGuardSourcesEqual(t *testing.T) {
	a := guardSources{loopbackIndex: 1, v4: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, v6: []netip.Addr{netip.IPv6Loopback()}}
	other := a
	other.loopbackIndex = 2
	if !a.equal(a) || a.equal(other) {
		t.Errorf("equal: same %v, another loopback device %v; want true, false", a.equal(a), a.equal(other))
	}
}

// TestLoopbackGuardSaysWhatItCut: a namespace with more addresses than
// the filter holds is logged with how many were left out, on each
// refresh that installs a filter; one within the bounds logs nothing.
func TestLoopbackGuardSaysWhatItCut(t *testing.T) {
	lo := loopbackIndex(t)
	var many guardSources
	many.loopbackIndex = lo
	for i := range guardMaxV4 + 2 {
		many.v4 = append(many.v4, netip.PrefixFrom(netip.AddrFrom4([4]byte{127, 2, byte(i >> 8), byte(i)}), 32))
	}
	for _, tt := range []struct {
		name string
		s    guardSources
		want string
	}{
		{"over the bound", many, "addresses_not_held=2"},
		{"within it", guardSources{loopbackIndex: lo, v4: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			raw, err := ln.(*net.TCPListener).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var logs strings.Builder
			g := &loopbackGuard{raw: raw, log: slog.New(slog.NewTextHandler(&logs, nil)), sources: func() (guardSources, error) { return tt.s, nil }}
			if err := g.refresh(); err != nil {
				t.Fatal(err)
			}
			if tt.want == "" && logs.Len() != 0 {
				t.Errorf("logged %q for sources within the bounds", logs.String())
			}
			if tt.want != "" && !strings.Contains(logs.String(), tt.want) {
				t.Errorf("logged %q, want %q", logs.String(), tt.want)
			}
			if !g.last.equal(mustTrim(tt.s)) {
				t.Error("the guard does not remember the sources it installed")
			}
		})
	}
}

func mustTrim(s guardSources) guardSources {
	t, _ := s.trimmed()
	return t
}
