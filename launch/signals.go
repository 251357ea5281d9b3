package launch

import "syscall"

// rfc4254Signals are the signal names of RFC 4254 §6.10 ("signal" and
// "exit-signal" requests), without the "SIG" prefix.
var rfc4254Signals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT,
	"ALRM": syscall.SIGALRM,
	"FPE":  syscall.SIGFPE,
	"HUP":  syscall.SIGHUP,
	"ILL":  syscall.SIGILL,
	"INT":  syscall.SIGINT,
	"KILL": syscall.SIGKILL,
	"PIPE": syscall.SIGPIPE,
	"QUIT": syscall.SIGQUIT,
	"SEGV": syscall.SIGSEGV,
	"TERM": syscall.SIGTERM,
	"USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
}

// SignalByName maps an RFC 4254 signal name (ABRT ALRM FPE HUP ILL INT KILL PIPE QUIT SEGV TERM USR1 USR2)
// to a syscall.Signal; ok is false for anything else.
func SignalByName(name string) (sig syscall.Signal, ok bool) {
	sig, ok = rfc4254Signals[name]
	return sig, ok
}

// SignalName returns the RFC 4254 §6.10 name without "SIG" ("TERM"), "" if not signalled or no RFC name.
func (e Exit) SignalName() string {
	if e.Signal == 0 {
		return ""
	}
	for name, sig := range rfc4254Signals {
		if sig == e.Signal {
			return name
		}
	}
	return ""
}
