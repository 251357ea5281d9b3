package main

import (
	"fmt"
	"os"

	"github.com/aptl/aptl-kali-capture/sessionkey"
)

// session-signer is the signer child of a session key (package
// sessionkey): serve starts one per session with the key file as fd 3,
// and it alone ever holds the key's private half. Not for people: the
// usage does not list it.
func init() {
	register(sessionSignerCommand, command{hidden: true, summary: "a session key's signer child (serve starts it)", run: runSessionSigner})
}

const sessionSignerCommand = "session-signer"

func runSessionSigner(args []string) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "aptl-kali-capture session-signer: takes no arguments; serve starts it with a key on fd 3")
		return exitUsage
	}
	if err := sessionkey.ServeSigner(os.NewFile(3, "session key"), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture session-signer: %v\n", err)
		return exitFailure
	}
	return exitOK
}
