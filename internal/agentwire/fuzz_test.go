//go:build linux

package agentwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A root workload controls the agent's end of the socket, so every byte a
// sidecar decodes may be hostile, and so may every byte the agent decodes
// if the sidecar's peer checks are ever wrong. These targets hold the
// decoders to properties, not only to not panicking.

// decoders are the body decoders, each with the encoder of the same type,
// indexed by the fuzzer's selector byte.
var decoders = []struct {
	name   string
	decode func([]byte) (any, error)
	encode func(any) []byte
}{
	{"spawn", func(b []byte) (any, error) { return DecodeSpawn(b) }, func(m any) []byte { return m.(SpawnMsg).Encode() }},
	{"started", func(b []byte) (any, error) { return DecodeStarted(b) }, func(m any) []byte { return m.(StartedMsg).Encode() }},
	{"exit", func(b []byte) (any, error) { return DecodeExit(b) }, func(m any) []byte { return m.(ExitMsg).Encode() }},
	{"error", func(b []byte) (any, error) { return DecodeError(b) }, func(m any) []byte { return m.(ErrorMsg).Encode() }},
	{"signal", func(b []byte) (any, error) { return DecodeSignal(b) }, func(m any) []byte { return EncodeSignal(m.(string)) }},
	{"probe-ok", func(b []byte) (any, error) { return DecodeProbeOK(b) }, func(m any) []byte {
		if !m.(Instance).Reported() {
			return nil // an older agent's empty body
		}
		return EncodeProbeOK(m.(Instance))
	}},
}

// FuzzDecode feeds one body to one decoder. A body that decodes must be
// exactly the encoding of what it decoded to (a field has one encoding,
// nothing may follow the last one); a refused body yields the zero value
// and a protocol *Error, never a partly filled message.
func FuzzDecode(f *testing.F) {
	f.Add(uint8(0), SpawnMsg{Mode: SpawnPTY, User: "kali", Term: "xterm", Env: []string{"LANG=C.UTF-8"}}.Encode())
	f.Add(uint8(0), SpawnMsg{Mode: SpawnPipes, User: "kali", Command: "id\x00\xff"}.Encode())
	f.Add(uint8(1), StartedMsg{User: "kali", UID: 1000, GID: 1000, Home: "/home/kali", Shell: "/bin/bash", Note: "n"}.Encode())
	f.Add(uint8(1), StartedMsg{User: "kali", UID: 1000, GID: 1000, Home: "/home/kali", Shell: "/bin/bash", Note: "n",
		AuditSes: 7, AuditNote: "", AuditReported: true}.Encode())
	inst := Instance{ID: "0123456789abcdef0123456789abcdef", PID: 7, Started: time.Date(2026, 12, 2, 0, 0, 0, 5, time.UTC)}
	f.Add(uint8(1), StartedMsg{User: "kali", UID: 1000, GID: 1000, Home: "/home/kali", Shell: "/bin/bash", Note: "n",
		AuditSes: 7, AuditReported: true, Instance: inst}.Encode())
	f.Add(uint8(5), EncodeProbeOK(inst))
	f.Add(uint8(5), []byte{})
	f.Add(uint8(2), ExitMsg{Code: 1, Signal: 9, Core: 1}.Encode())
	f.Add(uint8(3), ErrorMsg{Code: CodeBusy, Message: "session limit"}.Encode())
	f.Add(uint8(4), EncodeSignal("INT"))
	f.Add(uint8(0), []byte{0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(0), []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(2), []byte{0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0})
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		d := decoders[int(which)%len(decoders)]
		m, err := d.decode(body)
		if err != nil {
			var we *Error
			if !errors.As(err, &we) || we.Code != CodeProtocol {
				t.Fatalf("%s: error %v is not a protocol error", d.name, err)
			}
			if !reflect.ValueOf(m).IsZero() {
				t.Fatalf("%s: refused body but returned %+v", d.name, m)
			}
			return
		}
		if again := d.encode(m); !bytes.Equal(again, body) {
			t.Fatalf("%s: decode(% x) = %+v, which encodes as % x", d.name, body, m, again)
		}
	})
}

// FuzzReadFrame sends one record with nfds fds attached over a real
// SOCK_SEQPACKET pair and reads it with ReadFrame. An accepted frame is
// the record as sent, with exactly the fds its header declares; a refused
// one leaves no fd with the caller.
func FuzzReadFrame(f *testing.F) {
	frame := func(typ Type, nfds uint8, body []byte) []byte {
		return append(AppendHeader(nil, Version, typ, nfds, uint32(len(body))), body...)
	}
	f.Add(frame(TypeSpawn, 1, SpawnMsg{Mode: SpawnPTY, User: "kali"}.Encode()), uint8(1))
	f.Add(frame(TypeSpawn, 3, SpawnMsg{Mode: SpawnPipes, User: "kali"}.Encode()), uint8(3))
	f.Add(frame(TypeExit, 0, ExitMsg{}.Encode()), uint8(0))
	f.Add(frame(TypeProbe, 0, nil), uint8(0))
	f.Add(frame(TypeSignal, 2, EncodeSignal("TERM")), uint8(1))
	f.Add(frame(TypeSignal, 0, []byte{1, 2, 3}), uint8(4))
	f.Add(AppendHeader(nil, 2, TypeProbe, 0, 0), uint8(0))
	f.Add([]byte{0, 1, 3}, uint8(0))
	f.Add([]byte{}, uint8(0))
	const maxLen = 512
	f.Fuzz(func(t *testing.T, record []byte, nfds uint8) {
		if len(record) > 4*maxLen {
			return // past maxLen either way; keeps each send in the socket buffer
		}
		send := int(nfds) % (MaxFDs + 2) // up to one fd more than a frame may carry
		a, b := seqpacketPair(t)
		files := devNulls(t, send)
		if err := SendRecord(a, record, files...); err != nil {
			t.Skipf("send: %v", err)
		}
		for _, f := range files {
			f.Close() // the receiver holds its own references now
		}
		if err := b.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		fr, err := ReadFrame(b, maxLen, TypeSpawn, TypeSignal, TypeProbe, TypeStarted, TypeExit, TypeError, TypeProbeOK)
		if err != nil {
			if fr.Files != nil {
				t.Fatalf("refused frame (%v) left %d fds with the caller", err, len(fr.Files))
			}
			return
		}
		defer fr.CloseFiles()
		switch {
		case len(record) > maxLen || len(record) < HeaderLen:
			t.Fatalf("accepted a %d-byte record, bounds %d..%d", len(record), HeaderLen, maxLen)
		case len(fr.Files) != send || int(record[3]) != send:
			t.Fatalf("accepted %d fds, sent %d, header says %d", len(fr.Files), send, record[3])
		case fr.Type != Type(record[2]) || !bytes.Equal(fr.Body, record[HeaderLen:]):
			t.Fatalf("frame %v % x, sent % x", fr.Type, fr.Body, record)
		}
	})
}

// FuzzParseRights parses arbitrary control data. Every fd field of an
// SCM_RIGHTS message is first replaced with a real fd (so that closing
// what parseRights returns closes only this test's files). Every fd must
// come back, so that the caller can close all of them, and the data is
// accepted only if it is at most one SCM_RIGHTS message and nothing else.
func FuzzParseRights(f *testing.F) {
	f.Add(unix.UnixRights(0))
	f.Add(unix.UnixRights(0, 0, 0))
	f.Add(append(unix.UnixRights(0), unix.UnixRights(0)...))
	f.Add(unix.UnixCredentials(&unix.Ucred{Pid: 1}))
	f.Add(append(unix.UnixRights(0), unix.UnixCredentials(&unix.Ucred{})...))
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, oob []byte) {
		if len(oob) > 4096 {
			return
		}
		oob = bytes.Clone(oob)
		want, planted, bad := plantFDs(t, oob)
		if want < 0 {
			return // more fds than the target opens per run
		}
		files, err := parseRights(oob)
		got := map[int]bool{}
		for _, file := range files {
			fd := int(file.Fd())
			if !planted[fd] || got[fd] {
				t.Fatalf("returned fd %d, which the data did not carry", fd)
			}
			got[fd] = true
			file.Close()
		}
		for fd := range planted {
			if !got[fd] {
				unix.Close(fd)
			}
		}
		if len(files) != want {
			t.Fatalf("returned %d fds, the data carries %d", len(files), want)
		}
		if (err != nil) != bad {
			t.Fatalf("err = %v, want an error: %v", err, bad)
		}
	})
}

// plantFDs replaces the fd fields of oob's SCM_RIGHTS messages with fds of
// /dev/null and returns how many it planted (-1 for too many), which ones,
// and whether parseRights must refuse the data.
func plantFDs(t *testing.T, oob []byte) (n int, planted map[int]bool, bad bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, nil, true
	}
	planted = map[int]bool{}
	rights := 0
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			bad = true
			continue
		}
		rights++
		bad = bad || len(m.Data)%4 != 0
		if n += len(m.Data) / 4; n > 64 {
			for fd := range planted {
				unix.Close(fd)
			}
			return -1, nil, false
		}
		for i := 0; i+4 <= len(m.Data); i += 4 {
			fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			planted[fd] = true
			binary.NativeEndian.PutUint32(m.Data[i:], uint32(fd))
		}
	}
	return n, planted, bad || rights > 1
}

// seqpacketPair and devNulls are internal/testutil's SeqpacketPair and
// DevNull: testutil imports this package, so this package's tests cannot
// import testutil.
func seqpacketPair(t *testing.T) (a, b *net.UnixConn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "seqpacket")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

func devNulls(t *testing.T, n int) []*os.File {
	var files []*os.File
	for range n {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}
