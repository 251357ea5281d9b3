package tests

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestBulkOutputArrivesAsRecorded: the broker delivers one batch while it
// reads and records the next (broker/run.go, copyOutput). Random bytes
// over many batches, on stdout and stderr at once, must reach the client
// exactly, in order, and be the recorded streams byte for byte (replayed
// with scriptreplay); the record must verify. A batch delivered out of
// order, twice, or not at all changes the bytes.
func TestBulkOutputArrivesAsRecorded(t *testing.T) {
	h := newHarness(t)
	const size = 8 << 20
	// Both streams run together; tee keeps the two copies identical so the
	// test can compare them with each other and with the record.
	command := fmt.Sprintf("head -c %d /dev/urandom | tee /dev/stderr", size)
	stdout, stderr, err := run(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "bulk-order"}, command)
	if err != nil {
		t.Fatal(err)
	}
	if len(stdout) != size || stdout != stderr {
		t.Fatalf("client got stdout %d bytes and stderr %d bytes (equal: %v), want %d of the same bytes on each", len(stdout), len(stderr), stdout == stderr, size)
	}
	h.waitIdle(t)
	dir := h.sessionDir("_unbound", "bulk-order")
	verifyOK(t, dir, h.hostKey)
	// Both streams are "out" in script's format: the replay holds the two
	// copies interleaved in the order they were recorded, so it has twice
	// the bytes; stdout's order is checked through the chain's per-stream
	// digests by the verifier above.
	if got := replay(t, dir, "out"); len(got) != 2*size {
		t.Errorf("replayed %d bytes, want %d", len(got), 2*size)
	}
	hdr := timingHeaders(t, dir)
	if hdr[vocab.HeaderBytesDelivered] != fmt.Sprint(size) || hdr[vocab.HeaderBytesDeliveredErr] != fmt.Sprint(size) {
		t.Errorf("delivered headers = %q / %q, want %d each", hdr[vocab.HeaderBytesDelivered], hdr[vocab.HeaderBytesDeliveredErr], size)
	}
}

// TestBulkExecOutputIsTheRecord: one stream, so the replayed record must
// equal, byte for byte and in order, what the client received.
func TestBulkExecOutputIsTheRecord(t *testing.T) {
	h := newHarness(t)
	const size = 8 << 20
	stdout, _, err := run(t, h.dial(t), map[string]string{"APTL_SESSION_ID": "bulk-exact"}, fmt.Sprintf("head -c %d /dev/urandom", size))
	if err != nil {
		t.Fatal(err)
	}
	if len(stdout) != size {
		t.Fatalf("client got %d bytes, want %d", len(stdout), size)
	}
	h.waitIdle(t)
	dir := h.sessionDir("_unbound", "bulk-exact")
	verifyOK(t, dir, h.hostKey)
	if got := replay(t, dir, "out"); !bytes.Equal(got, []byte(stdout)) {
		t.Errorf("the record (%d bytes) is not what the client received (%d bytes)", len(got), len(stdout))
	}
}

// TestBulkInputIsTheRecord: the input copier switches from its small
// buffer to pooled batches while the client sends in bulk and back when
// the channel is drained (broker/run.go, copyInput). 8 MiB of random stdin
// in writes of varied sizes must reach the command whole and in order, and
// the recorded input stream must be exactly those bytes.
func TestBulkInputIsTheRecord(t *testing.T) {
	h := newHarness(t)
	s, err := h.dial(t).NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Setenv("APTL_SESSION_ID", "bulk-in")
	stdin, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	s.Stdout = &stdout
	if err := s.Start("sha256sum"); err != nil {
		t.Fatal(err)
	}
	sent := make([]byte, 8<<20)
	rand.Read(sent)
	// Small writes (the copier stays on its quiet buffer), then large ones.
	for rest, size := sent, 1; len(rest) > 0; size = min(size*3, 200<<10) {
		k := min(size, len(rest))
		if _, err := stdin.Write(rest[:k]); err != nil {
			t.Fatal(err)
		}
		rest = rest[k:]
	}
	stdin.Close()
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(sent)
	if got, want := strings.Fields(stdout.String()), hex.EncodeToString(sum[:]); len(got) == 0 || got[0] != want {
		t.Fatalf("the command read %q, want the digest %s of what was sent", stdout.String(), want)
	}
	h.waitIdle(t)
	dir := h.sessionDir("_unbound", "bulk-in")
	verifyOK(t, dir, h.hostKey)
	if got := replay(t, dir, "in"); !bytes.Equal(got, sent) {
		t.Errorf("the recorded input (%d bytes) is not what the client sent (%d bytes)", len(got), len(sent))
	}
}
