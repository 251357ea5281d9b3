package main

import (
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// TestKeyMode: keyMode turns off line editing and echo and nothing else
// (Ctrl-C still interrupts, output is processed as before), and its
// restore puts back the mode it found, whole.
func TestKeyMode(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	get := func() unix.Termios {
		t.Helper()
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		return *tio
	}
	before := get()
	if before.Lflag&(unix.ICANON|unix.ECHO) != unix.ICANON|unix.ECHO {
		t.Fatalf("a new pty is not in line mode with echo: lflag %#x", before.Lflag)
	}
	restore, err := keyMode(tty)
	if err != nil {
		t.Fatal(err)
	}
	keys := get()
	if keys.Lflag&(unix.ICANON|unix.ECHO) != 0 || keys.Lflag&unix.ISIG == 0 || keys.Oflag != before.Oflag ||
		keys.Cc[unix.VMIN] != 1 || keys.Cc[unix.VTIME] != 0 {
		t.Errorf("key mode: lflag %#x oflag %#x (was %#x) vmin %d vtime %d; want ICANON and ECHO off, ISIG and the output flags kept, one byte a read",
			keys.Lflag, keys.Oflag, before.Oflag, keys.Cc[unix.VMIN], keys.Cc[unix.VTIME])
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if after := get(); after != before {
		t.Errorf("restore left %+v, want the mode found %+v", after, before)
	}
}
