//go:build !linux

package broker

import (
	"log/slog"
	"net"
)

// The loopback guard is a Linux socket filter (ingress_linux.go); elsewhere
// the listener takes what it is given.
type loopbackGuard struct{}

func guardListener(net.Listener, *slog.Logger) (*loopbackGuard, error) { return nil, nil }

func (*loopbackGuard) run(<-chan struct{}) {}

// Listen opens a TCP listener for the SSH port.
func Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
