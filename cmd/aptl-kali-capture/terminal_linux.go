package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether f is a terminal (a TCGETS that succeeds).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// keyMode sets the terminal f to hand over each key as it is typed,
// unechoed (ICANON and ECHO off, one byte a read), and returns what puts
// back the mode it found. Nothing else changes: ISIG stays, so Ctrl-C still
// interrupts, and the output flags stay, so the replayed bytes reach the
// screen as they do without keys (a raw mode would turn off OPOST).
func keyMode(f *os.File) (restore func() error, err error) {
	fd := int(f.Fd())
	saved, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	keys := *saved
	keys.Lflag &^= unix.ICANON | unix.ECHO
	keys.Cc[unix.VMIN], keys.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &keys); err != nil {
		return nil, err
	}
	return func() error { return unix.IoctlSetTermios(fd, unix.TCSETS, saved) }, nil
}
