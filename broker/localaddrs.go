package broker

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// The per-source pre-authentication limit (preauth.go) keys on the peer's
// address, but the workload shares the sidecar's network namespace and can
// connect from any address that namespace owns: all of 127.0.0.0/8, ::1 and
// the addresses of its interfaces. Counted one by one, a few of them would
// fill the whole table. Every local address is therefore one source; tool
// servers come from other hosts or containers (in the compose deployment
// through the engine's port publishing), so they are never local.

// localRefreshEvery bounds how often the interface addresses are read
// again: interfaces change rarely, and a flood of accepts must not become
// a flood of netlink dumps.
const localRefreshEvery = time.Second

// localAddrs answers whether an address belongs to the server's own
// network namespace, from a cache of its interface addresses.
type localAddrs struct {
	list func() ([]net.Addr, error) // net.InterfaceAddrs; tests replace it
	now  func() time.Time

	mu      sync.Mutex // guards the fields below
	set     map[netip.Addr]bool
	readAt  time.Time
	scanned bool
}

func newLocalAddrs() *localAddrs {
	return &localAddrs{list: net.InterfaceAddrs, now: time.Now}
}

// contains reports whether a is loopback or an address of one of the
// namespace's interfaces. a must be unmapped and without a zone
// (sourceOf).
func (l *localAddrs) contains(a netip.Addr) bool {
	if a.IsLoopback() {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); !l.scanned || now.Sub(l.readAt) >= localRefreshEvery {
		l.refreshLocked(now)
	}
	return l.set[a]
}

// refreshLocked rereads the interface addresses. On an error the previous
// set stays, and the next attempt waits the same interval.
func (l *localAddrs) refreshLocked(now time.Time) {
	l.readAt, l.scanned = now, true
	addrs, err := l.list()
	if err != nil {
		return
	}
	set := make(map[netip.Addr]bool, len(addrs))
	for _, a := range interfaceAddrs(addrs) {
		set[a] = true
	}
	l.set = set
}

// interfaceAddrs takes the IP addresses of an interface address list
// (net.InterfaceAddrs, net.Interface.Addrs), IPv4-mapped ones as IPv4.
func interfaceAddrs(addrs []net.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}
