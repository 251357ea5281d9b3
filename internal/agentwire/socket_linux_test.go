package agentwire

import (
	"strconv"
	"strings"
	"testing"
)

func TestCheckSocket(t *testing.T) {
	for _, tt := range []struct {
		socket string
		ok     bool
	}{
		{"@aptl-launch-agent", true},
		{"/run/aptl/agent.sock", true},
		{"", false},
		{"@", false},
		{"@with space", false},
		{"@ctl\x01", false},
		{"@del\x7f", false},
		{"@tilde~", true}, // 0x7e, the last printable byte
		{"@!", true},      // 0x21, the first
		{"relative/agent.sock", false},
		{"/" + strings.Repeat("a", maxSocketName), false},
		{"/nul\x00byte", false},
	} {
		t.Run(strconv.Quote(tt.socket), func(t *testing.T) {
			if err := CheckSocket(tt.socket); (err == nil) != tt.ok {
				t.Errorf("CheckSocket = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
