package launch

import (
	"syscall"
	"testing"
)

func TestSignalByName(t *testing.T) {
	tests := []struct {
		name string
		want syscall.Signal
		ok   bool
	}{
		{"ABRT", syscall.SIGABRT, true},
		{"ALRM", syscall.SIGALRM, true},
		{"FPE", syscall.SIGFPE, true},
		{"HUP", syscall.SIGHUP, true},
		{"ILL", syscall.SIGILL, true},
		{"INT", syscall.SIGINT, true},
		{"KILL", syscall.SIGKILL, true},
		{"PIPE", syscall.SIGPIPE, true},
		{"QUIT", syscall.SIGQUIT, true},
		{"SEGV", syscall.SIGSEGV, true},
		{"TERM", syscall.SIGTERM, true},
		{"USR1", syscall.SIGUSR1, true},
		{"USR2", syscall.SIGUSR2, true},
		{"SIGTERM", 0, false}, // RFC 4254 names carry no "SIG"
		{"term", 0, false},
		{"WINCH", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := SignalByName(tt.name)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("SignalByName(%q) = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
			}
			if ok {
				if back := (Exit{Signal: got}).SignalName(); back != tt.name {
					t.Fatalf("SignalName round trip = %q, want %q", back, tt.name)
				}
			}
		})
	}
}

func TestExitSignalName(t *testing.T) {
	tests := []struct {
		name string
		exit Exit
		want string
	}{
		{"exited", Exit{Code: 3}, ""},
		{"term", Exit{Signal: syscall.SIGTERM}, "TERM"},
		{"no rfc name", Exit{Signal: syscall.SIGWINCH}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.exit.SignalName(); got != tt.want {
				t.Fatalf("SignalName = %q, want %q", got, tt.want)
			}
		})
	}
}
