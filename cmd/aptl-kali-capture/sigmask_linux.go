package main

import "github.com/aptl/aptl-kali-capture/launch"

// prepareProcess runs before any subcommand. Local sessions inherit the
// server's signal mask, and a login shell must start with none blocked (as
// sshd's children do): start over with an empty mask if the starter
// blocked signals.
func prepareProcess() error { return launch.EnsureEmptySigmask() }
