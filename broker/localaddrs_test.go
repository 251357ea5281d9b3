package broker

import (
	"errors"
	"net"
	"testing"
	"time"
)

// fakeInterfaces stands for the namespace's interface list: it counts how
// often it is read, and can fail.
type fakeInterfaces struct {
	addrs []net.Addr
	err   error
	reads int
}

func (f *fakeInterfaces) list() ([]net.Addr, error) {
	f.reads++
	return f.addrs, f.err
}

func ipNet(s string) net.Addr {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}

// localGate is the defaults' gate, with the namespace's interfaces given
// by ifs and chance always keeping.
func localGate(ifs *fakeInterfaces, clock *time.Time) *preauthGate {
	l := newLocalAddrs()
	l.list, l.now = ifs.list, func() time.Time { return *clock }
	g := newPreauthGate(DefaultLimits(), l.contains)
	g.roll = func() int { return 99 }
	return g
}

// TestPreauthLocalAddressesShareOneSource: the workload can connect from
// any address its network namespace owns; all of them together get one
// per-source budget, while a peer from elsewhere keeps its own.
func TestPreauthLocalAddressesShareOneSource(t *testing.T) {
	clock := time.Unix(1000, 0)
	ifs := &fakeInterfaces{addrs: []net.Addr{ipNet("127.0.0.1/8"), ipNet("172.18.0.3/16"), ipNet("fd00::3/64")}}
	g := localGate(ifs, &clock)
	per := DefaultLimits().PerSourceMaxStartups
	for i := range per {
		if _, reason := admitConn(t, g, "127.0.0.2"); reason != "" {
			t.Fatalf("connection %d from 127.0.0.2 refused: %q", i+1, reason)
		}
	}
	for _, local := range []string{"127.0.0.5", "127.1.2.3", "::1", "::ffff:127.0.0.3", "172.18.0.3", "fd00::3"} {
		if _, reason := admitConn(t, g, local); reason != refusedPerSource {
			t.Errorf("local address %s after %d from 127.0.0.2: refusal %q, want %q", local, per, reason, refusedPerSource)
		}
	}
	for _, remote := range []string{"172.18.0.2", "192.0.2.10", "fd00::2"} {
		if _, reason := admitConn(t, g, remote); reason != "" {
			t.Errorf("a peer from another host (%s) was refused: %q", remote, reason)
		}
	}
	if got, want := g.unauthenticated(), per+3; got != want {
		t.Errorf("unauthenticated = %d, want %d", got, want)
	}
}

// TestLocalAddrsRefreshBounded: under a flood of accepts the interface list
// is read at most once per refresh interval, an address added since is
// local after the next refresh, and a failed read keeps the last set.
func TestLocalAddrsRefreshBounded(t *testing.T) {
	clock := time.Unix(1000, 0)
	ifs := &fakeInterfaces{addrs: []net.Addr{ipNet("172.18.0.3/16")}}
	g := localGate(ifs, &clock)
	for range 10000 {
		if k := g.keyOf(sourceOf(&net.TCPAddr{IP: net.ParseIP("172.18.0.3")})); !k.local {
			t.Fatal("an interface address was not local")
		}
	}
	if ifs.reads != 1 {
		t.Fatalf("10000 accepts within a second read the interfaces %d times, want 1", ifs.reads)
	}
	ifs.addrs = append(ifs.addrs, ipNet("10.9.0.7/24"))
	if g.keyOf(sourceOf(&net.TCPAddr{IP: net.ParseIP("10.9.0.7")})).local {
		t.Fatal("the interface list was read again before the interval passed")
	}
	clock = clock.Add(localRefreshEvery)
	if !g.keyOf(sourceOf(&net.TCPAddr{IP: net.ParseIP("10.9.0.7")})).local {
		t.Fatal("a new interface address was not local after the refresh interval")
	}
	ifs.err = errors.New("netlink: no buffer space")
	clock = clock.Add(localRefreshEvery)
	if !g.keyOf(sourceOf(&net.TCPAddr{IP: net.ParseIP("10.9.0.7")})).local || ifs.reads != 3 {
		t.Fatalf("a failed read lost the previous set (reads %d)", ifs.reads)
	}
	if !g.keyOf(sourceOf(&net.TCPAddr{IP: net.ParseIP("127.0.0.9")})).local {
		t.Fatal("loopback was not local")
	}
}
