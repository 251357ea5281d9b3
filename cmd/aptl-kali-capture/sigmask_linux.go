package main

import "github.com/aptl/aptl-kali-capture/internal/login"

// prepareProcess runs before any subcommand. Local sessions inherit the
// server's signal mask, and a login shell must start with none blocked (as
// sshd's children do; login.EnsureEmptySigmask says why): start over with an
// empty mask if the starter blocked signals.
func prepareProcess() error { return login.EnsureEmptySigmask() }
