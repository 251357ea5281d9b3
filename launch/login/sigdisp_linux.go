package login

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/aptl/aptl-kali-capture/launch"
)

var catchIgnoredSignalsOnce sync.Once

// CatchIgnoredSignals runs catchIgnoredSignals once per process. Call it
// before the first session starts.
func CatchIgnoredSignals() { catchIgnoredSignalsOnce.Do(catchIgnoredSignals) }

// catchIgnoredSignals makes every signal this process ignores caught instead,
// with the catch discarding it, so session processes start with default
// dispositions while the server stays as immune as its starter intended.
//
// Why: a server started from a non-interactive shell with `&` has SIGINT and
// SIGQUIT set to SIG_IGN (nohup does the same for SIGHUP), and execve(2) keeps
// that: "signals being caught are reset to default; ignored signals stay
// ignored" (execve(2), "signal dispositions"; signal(7)). A session shell would
// then inherit SIG_IGN and ^C would interrupt nothing (docs/OPERATING.md, "Behaviour a
// client can rely on": signals reach the shell). A caught
// signal is reset to SIG_DFL by execve. os/signal.Notify installs a handler
// even for SIGHUP and SIGINT that were ignored at start ("it will no longer be
// ignored", os/signal package docs).
//
// The signal mask needs no fix for the usual case: Go's fork path restores the
// mask the server itself started with (runtime AfterForkInChild), which is empty
// unless the server's starter blocked signals, which EnsureEmptySigmask undoes
// at start. TestLocalSignalDispositions (launch/local) checks both.
func catchIgnoredSignals() {
	var ignored []os.Signal
	for n := 1; n <= launch.MaxSignal; n++ {
		sig := syscall.Signal(n)
		if sig == syscall.SIGKILL || sig == syscall.SIGSTOP {
			continue // cannot be caught or ignored
		}
		if signal.Ignored(sig) {
			ignored = append(ignored, sig)
		}
	}
	if len(ignored) == 0 {
		return
	}
	// os/signal drops a signal rather than block when the channel is full, so a
	// small buffer and a drain loop are enough; the goroutine lives as long as the
	// process, like the handlers.
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, ignored...)
	go func() {
		for range ch {
		}
	}()
}
