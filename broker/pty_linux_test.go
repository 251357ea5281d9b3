package broker

import (
	"io"
	"log/slog"
	"os"
	"testing"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// pipeChannel is the channel openPipes wires the outputs to; nothing is
// written to it here.
type pipeChannel struct{ gossh.Channel }

func (pipeChannel) Stderr() io.ReadWriter { return nil }

func pipeSize(t *testing.T, f *os.File) int {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var size int
	if cerr := rc.Control(func(fd uintptr) { size, err = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return size
}

// TestOutputPipesHoldABatch: the stdout and stderr pipes of a session
// without a PTY are grown to batchSize, so a command writing in bulk is not
// held to a 64 KiB pipe and one read takes a whole batch.
func TestOutputPipesHoldABatch(t *testing.T) {
	r := &run{ss: &session{ch: pipeChannel{}, log: slog.New(slog.DiscardHandler)}}
	ends, err := r.openPipes()
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(ends)
	defer closeAll([]*os.File{r.stdin, r.outputs[0].src, r.outputs[1].src})
	for i, o := range r.outputs {
		if got := pipeSize(t, o.src); got != batchSize {
			t.Errorf("output %d: pipe size %d, want %d", i, got, batchSize)
		}
	}
}
