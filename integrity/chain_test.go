package integrity

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// fullFile is a log file on a disk that holds only budget more bytes: a
// write past it stores what fits and fails with ENOSPC, as write(2) on a
// full volume does.
type fullFile struct {
	*os.File
	budget int
}

func (f *fullFile) Write(p []byte) (int, error) {
	if len(p) <= f.budget {
		n, err := f.File.Write(p)
		f.budget -= n
		return n, err
	}
	n, err := f.File.Write(p[:f.budget])
	f.budget -= n
	if err == nil {
		err = syscall.ENOSPC
	}
	return n, err
}

// readChain reads a log back as a verifier does: every line ends in a
// newline, parses, and chains from the seed; it returns the records.
func readChain(t *testing.T, path, run, sess string) []Record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("log ends in a torn record: %q", data[bytes.LastIndexByte(data, '\n')+1:])
	}
	var recs []Record
	prev := Seed(run, sess)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %d: %v", len(recs), err)
		}
		if r.Seq != uint64(len(recs)) || r.Prev != prev {
			t.Fatalf("line %d: seq %d prev %s, want seq %d prev %s", len(recs), r.Seq, r.Prev, len(recs), prev)
		}
		sum := sha256.Sum256(sc.Bytes())
		prev = hex.EncodeToString(sum[:])
		recs = append(recs, r)
	}
	return recs
}

// TestTornWriteIsCutBack: a full disk stores part of a record; the log
// is cut back to the last whole record, the record is not lost but
// written first once there is room, and the chain goes on unbroken.
func TestTornWriteIsCutBack(t *testing.T) {
	for _, budget := range []int{0, 1, 100, 300} {
		path := filepath.Join(t.TempDir(), "integrity.jsonl")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		disk := &fullFile{File: f, budget: 1 << 20}
		w := NewWriter(disk, "run", "sess", newSigner(t), time.Now)
		if err := w.Append(vocab.TypeOpen, map[string]string{"a": "b"}); err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		disk.budget = budget
		w.Data(vocab.StreamOut, 10, []byte("hello"))
		if err := w.Append("event", map[string]string{"k": strings.Repeat("v", 200)}); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("budget %d: Append on a full disk = %v, want ENOSPC", budget, err)
		}
		if got := readChain(t, path, "run", "sess"); len(got) > 3 {
			t.Fatalf("budget %d: %d records stored on a full disk", budget, len(got))
		}
		if fi2, _ := f.Stat(); fi2.Size() < fi.Size() {
			t.Fatalf("budget %d: the cut removed whole records (%d < %d)", budget, fi2.Size(), fi.Size())
		}
		if err := w.Flush(); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("budget %d: Flush on a full disk = %v, want ENOSPC again", budget, err)
		}
		disk.budget = 1 << 20
		if err := w.Checkpoint(nil); err != nil {
			t.Fatalf("budget %d: Checkpoint once there is room: %v", budget, err)
		}
		recs := readChain(t, path, "run", "sess")
		var types []string
		for _, r := range recs {
			types = append(types, r.Type)
		}
		if got := strings.Join(types, ","); got != "open,data,event,checkpoint" {
			t.Fatalf("budget %d: records %s, want open,data,event,checkpoint", budget, got)
		}
		if w.Seq() != 4 {
			t.Fatalf("budget %d: Seq %d, want 4", budget, w.Seq())
		}
	}
}

// unrewindable is a log that cannot be cut back (not a file).
type unrewindable struct{ buf bytes.Buffer }

func (u *unrewindable) Write(p []byte) (int, error) {
	u.buf.Write(p[:len(p)/2])
	return len(p) / 2, syscall.ENOSPC
}

// TestTornWriteThatCannotBeCut: a torn line that stays makes the error
// sticky: no record may follow it.
func TestTornWriteThatCannotBeCut(t *testing.T) {
	u := &unrewindable{}
	w := NewWriter(u, "run", "sess", newSigner(t), time.Now)
	first := w.Append(vocab.TypeOpen, nil)
	if first == nil || !strings.Contains(first.Error(), "cannot be cut back") {
		t.Fatalf("Append = %v, want the torn record named", first)
	}
	n := u.buf.Len()
	if err := w.Append("event", nil); !errors.Is(err, first) && err.Error() != first.Error() {
		t.Fatalf("second Append = %v, want the sticky %v", err, first)
	}
	if u.buf.Len() != n {
		t.Fatal("a record was written after a torn one")
	}
}

// TestUnwrittenBound: a log that never takes a byte holds records back
// only up to maxUnwritten, then gives up.
func TestUnwrittenBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "integrity.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := NewWriter(&fullFile{File: f}, "run", "sess", newSigner(t), time.Now)
	big := map[string]string{"k": strings.Repeat("v", 4096)}
	var err2 error
	for i := 0; i <= 2*maxUnwritten/4096; i++ {
		if err2 = w.Append("event", big); err2 == nil || strings.Contains(err2.Error(), "past the bound") {
			break
		}
	}
	if !strings.Contains(err2.Error(), "past the bound") {
		t.Fatalf("error %v, want the bound named", err2)
	}
	if err := w.Append("event", nil); err == nil || err.Error() != err2.Error() {
		t.Fatalf("after the bound: %v, want the sticky %v", err, err2)
	}
}

// TestDataOnFullDiskKeepsAccounting: Data whose flush of the previous
// stream's record fails says so, and still accounts for its bytes: once
// there is room both records are written, with their lengths.
func TestDataOnFullDiskKeepsAccounting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "integrity.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	disk := &fullFile{File: f, budget: 1 << 20}
	w := NewWriter(disk, "run", "sess", newSigner(t), time.Now)
	if err := w.Append(vocab.TypeOpen, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Data(vocab.StreamOut, 10, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	disk.budget = 7
	if err := w.Data(vocab.StreamIn, 13, []byte("de")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Data after a failed flush = %v, want ENOSPC", err)
	}
	disk.budget = 1 << 20
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	recs := readChain(t, path, "run", "sess")
	if len(recs) != 3 || recs[1].Data.Len != 3 || recs[2].Data.Len != 2 || recs[2].Data.Stream != vocab.StreamIn || recs[2].Data.Off != 13 {
		t.Fatalf("records %+v, want open, 3 bytes out at 10, 2 bytes in at 13", recs)
	}
}

// Equivalent mutants (gremlins), chain.go: makeRecord's `r.Sig == ""` ->
// `!=` sends data records through marshalRecord, which writes the same
// bytes as the fast path (TestDataLineIsJSONMarshal's contract); `2 *
// sha256.Size` -> `+` sizes a scratch array AppendEncode grows; writeOut's
// `n > whole` -> `>=` cuts back 0 bytes.

// TestUnwrittenBoundIsExact: exactly maxUnwritten bytes held back is
// still within the bound (the error is the write's, not sticky); one
// byte more is past it.
func TestUnwrittenBoundIsExact(t *testing.T) {
	for _, past := range []int{0, 1} {
		path := filepath.Join(t.TempDir(), "integrity.jsonl")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		w := NewWriter(&fullFile{File: f}, "run", "sess", newSigner(t), func() time.Time { return testTime })
		// Records of one shape, whose lines differ only in the value's
		// length (and the seq's digits, kept at two), up to the bound.
		line := func(v int) error { return w.Append("event", map[string]string{"k": strings.Repeat("v", v)}) }
		for range 10 { // seqs 0 to 9; the rest have two digits
			line(0)
		}
		before := len(w.unwritten)
		for range 10 {
			line(0)
		}
		base := (len(w.unwritten) - before) / 10
		for len(w.unwritten)+base+20000 < maxUnwritten {
			if err := line(20000); err == nil || strings.Contains(err.Error(), "past the bound") {
				t.Fatalf("below the bound: %v", err)
			}
		}
		err = line(maxUnwritten - len(w.unwritten) - base + past)
		if len(w.unwritten) != maxUnwritten+past {
			t.Fatalf("held back %d bytes, want %d (the record lines are not the length the test assumes)", len(w.unwritten), maxUnwritten+past)
		}
		if gaveUp := err != nil && strings.Contains(err.Error(), "past the bound"); gaveUp != (past > 0) {
			t.Errorf("%d bytes held back: %v; want past the bound %v", len(w.unwritten), err, past > 0)
		}
	}
}
