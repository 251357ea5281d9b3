package agentwire

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestInstanceIDAlphabet holds an instance id to 32 lower-case hex digits
// at every edge of the alphabet: the bytes just outside '0'-'9' and 'a'-'f'
// are refused, and so is one digit more or less.
func TestInstanceIDAlphabet(t *testing.T) {
	id := func(c byte) string { return strings.Repeat(string(c), InstanceIDLen) }
	for _, ok := range []string{id('0'), id('9'), id('a'), id('f')} {
		if !isInstanceID(ok) {
			t.Errorf("isInstanceID(%q) = false, want true", ok)
		}
	}
	for _, bad := range []string{id('/'), id(':'), id('`'), id('g'), id('A'), id('0')[1:], id('0') + "0"} {
		if isInstanceID(bad) {
			t.Errorf("isInstanceID(%q) = true, want false", bad)
		}
	}
}

// TestSpawnEnvBound: a spawn request carries its env entries whole, up to
// maxEnvEntries of them; one more is refused by count, before any is read.
func TestSpawnEnvBound(t *testing.T) {
	env := func(n int) []string {
		var kv []string
		for i := range n {
			kv = append(kv, fmt.Sprintf("APTL_E%d=%d", i, i))
		}
		return kv
	}
	for _, n := range []int{0, 2, maxEnvEntries} {
		sent := SpawnMsg{Mode: SpawnPTY, User: "kali", Term: "xterm", Command: "id", Env: env(n)}
		got, err := DecodeSpawn(sent.Encode())
		if err != nil || !slices.Equal(got.Env, sent.Env) || got.User != "kali" || got.Command != "id" {
			t.Errorf("spawn with %d env entries: %d back, %v", n, len(got.Env), err)
		}
	}
	_, err := DecodeSpawn(SpawnMsg{Mode: SpawnPTY, User: "kali", Env: env(maxEnvEntries + 1)}.Encode())
	var we *Error
	if !errors.As(err, &we) || we.Code != CodeProtocol || !strings.Contains(err.Error(), fmt.Sprintf("%d env entries, at most %d", maxEnvEntries+1, maxEnvEntries)) {
		t.Errorf("spawn with %d env entries: %v, want refused by count", maxEnvEntries+1, err)
	}
}

// TestSendRecordWithoutFilesSendsNoControlData: a frame with no fds goes
// without an SCM_RIGHTS message (an empty one would be control data the
// receiver must parse); one with fds carries exactly one.
func TestSendRecordWithoutFilesSendsNoControlData(t *testing.T) {
	a, b := seqpacketPair(t)
	oob := make([]byte, 256)
	buf := make([]byte, 64)
	for _, nfds := range []int{0, 1} {
		files := devNulls(t, nfds)
		if err := SendRecord(a, AppendHeader(nil, Version, TypeProbe, uint8(nfds), 0), files...); err != nil {
			t.Fatal(err)
		}
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, oobn, _, _, err := b.ReadMsgUnix(buf, oob)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseRights(oob[:oobn])
		for _, f := range append(got, files...) {
			f.Close()
		}
		if err != nil || len(got) != nfds || (nfds == 0) != (oobn == 0) {
			t.Errorf("%d fds sent: %d bytes of control data holding %d fds (%v)", nfds, oobn, len(got), err)
		}
	}
}

// TestSendRecordToAClosedPeer names the kernel's error, not a short write.
func TestSendRecordToAClosedPeer(t *testing.T) {
	a, b := seqpacketPair(t)
	b.Close()
	err := SendRecord(a, AppendHeader(nil, Version, TypeProbe, 0, 0))
	if err == nil || strings.Contains(err.Error(), "short write") {
		t.Errorf("send to a closed peer: %v, want the kernel's error", err)
	}
}
