// Command aptl-login-trampoline is the login trampoline of aptl-kali-capture's
// local launch adapter, as a program of its own: the server starts it once
// per session, with argv[0] aptl-login-trampoline and the session's command
// on fd 3, and it gives the session its kernel audit session, becomes the
// session's user and execs the login shell (launch/login/trampoline_linux.go).
//
// Why a program of its own: the server can re-execute itself for this, but
// it links the pcap witness, whose dependency fills 41 MB of tables at
// start, 7 to 10 ms of every session's start; this program links only the
// login package and starts in about 2 ms. The server uses it when it lies
// beside the server's own program and is from the same build
// (login.UseTrampolineProgram); it is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/aptl/aptl-kali-capture/launch/login"
)

func main() {
	// A process started as the trampoline, or for the server's check run
	// of this program, never returns from here.
	login.TrampolineMain()
	fmt.Fprintf(os.Stderr, "%s: started by aptl-kali-capture's local launch adapter for each session, not by hand\n", login.TrampolineProgram)
	os.Exit(2)
}
