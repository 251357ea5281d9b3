//go:build !linux

package broker

import "net"

// withQuickAck is Linux only (quickack_linux.go says why); elsewhere the
// connection is used as accepted.
func withQuickAck(conn net.Conn) net.Conn { return conn }
