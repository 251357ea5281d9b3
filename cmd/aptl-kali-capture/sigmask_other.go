//go:build !linux

package main

// prepareProcess has nothing to do where no session is launched: only the
// examiner's subcommands run off Linux.
func prepareProcess() error { return nil }
