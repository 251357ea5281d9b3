package recorder

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
)

// chunk returns the bytes goroutine g writes as its i-th chunk on stream.
// The prefix identifies the chunk, and the varying length makes a
// misattributed size shift every later chunk.
func chunk(stream byte, g, i int) []byte {
	return fmt.Appendf(nil, "<%c%d:%d:%s>", stream, g, i, strings.Repeat("\r\n\x00", i%7))
}

// TestConcurrentWritesKeepOrder writes from several goroutines and checks that
// the typescript body is the concatenation of whole chunks, in the order the
// timing file lists them, with each goroutine's chunks in its own order.
func TestConcurrentWritesKeepOrder(t *testing.T) {
	const goroutines, perG = 8, 200
	s := newTestSession(t, Meta{RunID: "r", SessionID: "s", Term: "xterm", Rows: 24, Cols: 80})
	errc := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() { errc <- writeChunks(s, g, perG) })
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	mustOK(t, s.Close(0))

	entries := dataEntries(t, readRecord(t, s.Dir(), "timing"))
	ts := readRecord(t, s.Dir(), "typescript")
	_, body, _ := strings.Cut(ts, "\n")
	var want bytes.Buffer
	next := make([]int, goroutines) // next expected chunk index per goroutine
	for n, e := range entries {
		if len(body) < e.n {
			t.Fatalf("entry %d: body too short for %d bytes", n, e.n)
		}
		var g, i int
		if _, err := fmt.Sscanf(body[:e.n], "<"+string(e.stream)+"%d:%d:", &g, &i); err != nil || g < 0 || g >= goroutines {
			t.Fatalf("entry %d (%c %d): chunk does not start with its own stream tag", n, e.stream, e.n)
		}
		if i != next[g] {
			t.Fatalf("entry %d: goroutine %d chunk %d, want %d", n, g, i, next[g])
		}
		next[g]++
		want.Write(chunk(e.stream, g, i))
		body = body[e.n:]
	}
	for g, n := range next {
		if n != perG {
			t.Errorf("goroutine %d: %d chunks in timing, want %d", g, n, perG)
		}
	}
	if !strings.HasPrefix(body, "\nScript done on ") {
		t.Errorf("typescript has %d bytes after the timed body that are not the trailer", len(body))
	}
	_, gotBody, _ := strings.Cut(ts, "\n")
	assertSameBytes(t, "typescript body", []byte(gotBody[:want.Len()]), want.Bytes())
}

// writeChunks is one writer goroutine: it alternates streams and sometimes
// resizes. It returns its first error instead of failing the test from a
// goroutine other than the test's own.
func writeChunks(s *Session, g, n int) error {
	for i := range n {
		var err error
		if i%2 == 0 {
			err = s.Output(chunk('O', g, i))
		} else {
			err = s.Input(chunk('I', g, i))
		}
		if err == nil && i%50 == 0 {
			err = s.Resize(24+g, 80+i)
		}
		if err != nil {
			return fmt.Errorf("goroutine %d chunk %d: %w", g, i, err)
		}
	}
	return nil
}

type dataEntry struct {
	stream byte
	n      int
}

// dataEntries returns the I and O entries of a timing file, in order.
func dataEntries(t *testing.T, timing string) []dataEntry {
	t.Helper()
	var es []dataEntry
	for _, line := range strings.Split(strings.TrimSuffix(timing, "\n"), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || (f[0] != "I" && f[0] != "O") {
			continue
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n <= 0 {
			t.Fatalf("bad timing line %q", line)
		}
		es = append(es, dataEntry{f[0][0], n})
	}
	return es
}

func TestCloseIsFinal(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "s"})
	mustOK(t, s.Output([]byte("x")))
	mustOK(t, s.Close(0))
	ts, tm := readRecord(t, s.Dir(), "typescript"), readRecord(t, s.Dir(), "timing")

	if err := s.Close(1, Header{Name: "APTL_X", Value: "again"}); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	for name, err := range map[string]error{
		"Input":  s.Input([]byte("y")),
		"Output": s.Output([]byte("y")),
		"Resize": s.Resize(1, 1),
		"empty":  s.Output(nil),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if readRecord(t, s.Dir(), "typescript") != ts || readRecord(t, s.Dir(), "timing") != tm {
		t.Error("record changed after Close")
	}
	if in, out := s.Bytes(); in != 0 || out != 1 {
		t.Errorf("Bytes() = %d, %d; want 0, 1", in, out)
	}
}

func TestZeroLengthWritesNothing(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "s"})
	before := readRecord(t, s.Dir(), "timing")
	mustOK(t, s.Input(nil))
	mustOK(t, s.Output([]byte{}))
	if readRecord(t, s.Dir(), "timing") != before {
		t.Error("zero-length write added a timing entry")
	}
}

func TestWriteFailureIsSticky(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "s"})
	mustOK(t, s.Output([]byte("kept")))
	s.ts.Close() // simulate the disk going away under the session
	err := s.Output([]byte("lost"))
	if !errors.Is(err, os.ErrClosed) || !strings.Contains(err.Error(), "recorder: write typescript") {
		t.Fatalf("Output after failure = %v, want wrapped write typescript error", err)
	}
	for name, again := range map[string]error{
		"Input":  s.Input([]byte("z")),
		"Output": s.Output([]byte("z")),
		"Resize": s.Resize(1, 2),
	} {
		if again != err {
			t.Errorf("%s after failure = %v, want the first error again", name, again)
		}
	}
	if cerr := s.Close(0); !errors.Is(cerr, os.ErrClosed) {
		t.Errorf("Close after failure = %v, want the failure reported", cerr)
	}
	if ts := readRecord(t, s.Dir(), "typescript"); !strings.HasSuffix(ts, "]\nkept") {
		t.Errorf("typescript should end with the accepted bytes and no trailer, got %d bytes", len(ts))
	}
	if _, out := s.Bytes(); out != 4 {
		t.Errorf("Bytes() out = %d, want 4", out)
	}
}

func TestCloseWithBadHeaderNameStillCloses(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "s"})
	err := s.Close(2, Header{Name: "APTL_OK", Value: "v"}, Header{Name: "bad name", Value: "v"})
	if !errors.Is(err, errHeaderName) {
		t.Fatalf("Close = %v, want errHeaderName", err)
	}
	if !errors.Is(s.Output([]byte("x")), ErrClosed) {
		t.Error("session still open after Close with a bad header name")
	}
	if !strings.HasSuffix(readRecord(t, s.Dir(), "typescript"), `[COMMAND_EXIT_CODE="2"]`+"\n") {
		t.Error("trailer missing")
	}
	if tm := readRecord(t, s.Dir(), "timing"); !strings.HasSuffix(tm, "H 0.000000 EXIT_CODE 2\n") {
		t.Errorf("timing should end with EXIT_CODE and no extras, got tail %q", tm[max(len(tm)-40, 0):])
	}
}

func TestAnnotate(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "s"})
	mustOK(t, s.Output([]byte("x")))
	mustOK(t, s.Annotate(Header{Name: "APTL_RUN_AS", Value: "kali\nINJECTED 1"}))
	if err := s.Annotate(Header{Name: "bad name"}); err == nil {
		t.Error("invalid header name accepted")
	}
	mustOK(t, s.Close(0))
	if err := s.Annotate(Header{Name: "LATE", Value: "x"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Annotate after Close: %v, want ErrClosed", err)
	}
	hs := timingHeaders(t, readRecord(t, s.Dir(), "timing"))
	if v, ok := headerValue(hs, "APTL_RUN_AS"); !ok || v != `kali\nINJECTED 1` {
		t.Errorf("APTL_RUN_AS = %q, %v", v, ok)
	}
	if _, ok := headerValue(hs, "LATE"); ok {
		t.Error("header written after Close")
	}
}

// TestLogWriteFailureIsTheWritesError: when the integrity log cannot be
// written (its file gone from under the session), the write whose record
// met the failure reports it, naming the log, and so does every later
// one: the broker forwards nothing the log could not account for.
func TestLogWriteFailureIsTheWritesError(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "s"})
	mustOK(t, s.Output([]byte("coalesced")))
	s.mu.Lock()
	s.log.Close()
	s.mu.Unlock()
	// The pending output record is written when the stream changes.
	err := s.Input([]byte("ls\r"))
	if !errors.Is(err, os.ErrClosed) {
		t.Fatalf("the write that met the log's failure = %v, want it reported", err)
	}
	if again := s.Output([]byte("x")); !errors.Is(again, os.ErrClosed) {
		t.Errorf("a later write = %v, want the same failure", again)
	}
	// Nothing after the failure reached the log: no close record, no
	// final checkpoint; what the log holds is its state at the cut.
	leaves(s, evidence.StatusUnfinalized)
}
