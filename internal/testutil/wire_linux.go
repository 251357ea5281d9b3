package testutil

import "github.com/aptl/aptl-kali-capture/internal/agentwire"

// RawFrame builds a frame whose header may lie in any field, so tests can
// see how a receiver refuses it. Send it with agentwire.SendRecord.
func RawFrame(version uint16, typ agentwire.Type, nfds uint8, declaredLen int, body []byte) []byte {
	b := agentwire.AppendHeader(make([]byte, 0, agentwire.HeaderLen+len(body)), version, typ, nfds, uint32(declaredLen))
	return append(b, body...)
}

// GoodFrame builds a frame with an honest header, and nfds as declared.
func GoodFrame(typ agentwire.Type, body []byte, nfds uint8) []byte {
	return RawFrame(agentwire.Version, typ, nfds, len(body), body)
}
