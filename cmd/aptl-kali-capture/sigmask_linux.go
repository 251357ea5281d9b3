package main

import "github.com/aptl/aptl-kali-capture/launch/login"

// prepareProcess runs first in main, before any subcommand. A process
// started as the login trampoline (the local adapter's way to give a
// session its own audit session, launch/login/trampoline_linux.go)
// becomes the session's shell here and never returns. Otherwise: local
// sessions inherit the server's signal mask, and a login shell must start
// with none blocked (as sshd's children do; login.EnsureEmptySigmask says
// why): start over with an empty mask if the starter blocked signals.
func prepareProcess() error {
	login.TrampolineMain()
	return login.EnsureEmptySigmask()
}
