package agentwire

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// Equivalent mutants (gremlins), wire_linux.go: SendRecord's `len(files) >
// 0` -> `>= 0` builds an SCM_RIGHTS message of no fds, which the kernel
// sends as none; Truncate's `len(s) > n` -> `>=` cuts a string to the
// length it has.

// TestReadFrameRefusals is the frame reader's table: each case is a record
// a peer could send, the error it must get, by its words, and for every
// refusal no fd left open with the caller. The accepted cases hold the
// edges: the most fds a frame may carry, a body of exactly maxLen.
func TestReadFrameRefusals(t *testing.T) {
	const maxLen = 64
	frame := func(version uint16, typ Type, nfds uint8, bodyLen uint32, body []byte) []byte {
		return append(AppendHeader(nil, version, typ, nfds, bodyLen), body...)
	}
	spawn := SpawnMsg{Mode: SpawnPipes, User: "kali"}.Encode()
	full := make([]byte, maxLen-HeaderLen) // a body that makes the record exactly maxLen
	cases := []struct {
		name   string
		record []byte
		fds    int
		want   string // "" accepts
	}{
		{"spawn with its three pipes (the most fds a frame carries)", frame(Version, TypeSpawn, MaxFDs, uint32(len(spawn)), spawn), MaxFDs, ""},
		{"a record of exactly maxLen bytes", frame(Version, TypeProbe, 0, uint32(len(full)), full), 0, ""},
		{"one fd more than a frame may carry", frame(Version, TypeSpawn, MaxFDs+1, uint32(len(spawn)), spawn), MaxFDs + 1, "more than 3 fds"},
		{"one byte more than maxLen", frame(Version, TypeProbe, 0, uint32(len(full)+1), append(full, 0)), 0, "frame larger than 64 bytes"},
		{"another protocol version", frame(Version+1, TypeProbe, 0, 0, nil), 0, "frame version 2, this side speaks 1"},
		{"a header claiming more body than came", frame(Version, TypeProbe, 0, 5, []byte{1, 2}), 0, "header says 5 body bytes, got 2"},
		{"a header claiming less body than came", frame(Version, TypeProbe, 0, 1, []byte{1, 2}), 0, "header says 1 body bytes, got 2"},
		{"a header that declares fewer fds than arrived", frame(Version, TypeSpawn, 1, uint32(len(spawn)), spawn), 3, "declares 1 fds, 3 arrived"},
		{"a header that declares fds that never came", frame(Version, TypeSpawn, 3, uint32(len(spawn)), spawn), 0, "declares 3 fds, 0 arrived"},
		{"a reply type where a request is wanted", frame(Version, TypeExit, 0, 0, nil), 0, "unexpected"},
		{"a record shorter than a header", []byte{0, 1, 3}, 0, "truncated frame: 3 bytes, header needs 8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := seqpacketPair(t)
			files := devNulls(t, c.fds)
			if err := SendRecord(a, c.record, files...); err != nil {
				t.Fatalf("send: %v", err)
			}
			for _, f := range files {
				f.Close()
			}
			if err := b.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Fatal(err)
			}
			fr, err := ReadFrame(b, maxLen, TypeSpawn, TypeSignal, TypeProbe)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				defer fr.CloseFiles()
				if len(fr.Files) != c.fds || len(fr.Body) != len(c.record)-HeaderLen {
					t.Errorf("accepted with %d fds and a %d-byte body; sent %d and %d", len(fr.Files), len(fr.Body), c.fds, len(c.record)-HeaderLen)
				}
				return
			}
			if err == nil {
				fr.CloseFiles()
				t.Fatalf("accepted; want an error saying %q", c.want)
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.Code != CodeProtocol || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q (%T), want a protocol error saying %q", err, err, c.want)
			}
			if fr.Files != nil {
				t.Errorf("the refusal left %d fds with the caller", len(fr.Files))
			}
		})
	}
}

// TestReadFrameClosesRefusedFDs: the fds of a refused frame are closed by
// the reader, not only dropped from the result: the process's fd count is
// back where it was.
func TestReadFrameClosesRefusedFDs(t *testing.T) {
	a, b := seqpacketPair(t)
	before := openFDs(t)
	files := devNulls(t, MaxFDs)
	spawn := SpawnMsg{Mode: SpawnPipes, User: "kali"}.Encode()
	if err := SendRecord(a, append(AppendHeader(nil, Version+1, TypeSpawn, MaxFDs, uint32(len(spawn))), spawn...), files...); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := ReadFrame(b, 256, TypeSpawn); err == nil {
		t.Fatal("a frame of another version was accepted")
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d fds open after the refusal, %d before: the refused frame's fds leaked", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(entries)
}
