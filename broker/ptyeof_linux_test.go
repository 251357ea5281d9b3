package broker

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestTerminalStateIsTheSlaves holds the kernel to what typeEOF relies on:
// asked through the master, TCGETS answers with the slave's termios, and
// the unread count is the slave's input queue (whole lines in canonical
// mode, every byte otherwise), not the master's; a terminal that is no
// session's counts as held by its shell (no job in the foreground).
func TestTerminalStateIsTheSlaves(t *testing.T) {
	m, slave, err := allocatePTY()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer slave.Close()
	look := func(what string) termState {
		t.Helper()
		st, err := m.terminalState()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return st
	}
	if st := look("fresh"); !st.icanon || st.veof != 4 || st.unread != 0 || !st.shellHolds {
		t.Fatalf("fresh terminal: %+v, want canonical, VEOF 04, nothing unread, no job", st)
	}
	if _, err := m.Write([]byte("ab\ncd")); err != nil {
		t.Fatal(err)
	}
	// The line discipline takes input asynchronously (the flip buffer's
	// work): wait for it, bounded.
	for i := 0; look("typed").unread != 3 && i < 100; i++ {
		unix.Nanosleep(&unix.Timespec{Nsec: 1e6}, nil)
	}
	if st := look("typed ahead, canonical"); st.unread != 3 {
		t.Fatalf("canonical: %d unread, want 3 (the whole line only)", st.unread)
	}
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag &^= unix.ICANON
	tio.Cc[unix.VEOF] = 0
	if err := unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	if st := look("non-canonical"); st.icanon || st.veof != 0 || st.unread != 5 {
		t.Fatalf("non-canonical, VEOF disabled on the slave: %+v, want icanon false, veof 0, 5 unread", st)
	}
	buf := make([]byte, 16)
	if n, err := slave.Read(buf); err != nil || n != 5 {
		t.Fatalf("slave read %d, %v", n, err)
	}
	if st := look("read"); st.unread != 0 {
		t.Fatalf("after the slave read everything: %d unread", st.unread)
	}
}
