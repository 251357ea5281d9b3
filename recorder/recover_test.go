package recorder

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestNeedsRecoveryReadsTheLogTail: a session needs recovery unless its
// log ends, in whole lines, with the close record and its checkpoint, or
// a recovery file is there already; the tail is read from the end of the
// file however long the log is.
func TestNeedsRecoveryReadsTheLogTail(t *testing.T) {
	const (
		open       = `{"type":"open"}` + "\n"
		data       = `{"type":"data"}` + "\n"
		closeRec   = `{"type":"close"}` + "\n"
		checkpoint = `{"type":"checkpoint"}` + "\n"
	)
	// A log longer than the 64 KiB tail needsRecovery reads, so the
	// tail's place in the file matters.
	long := open + strings.Repeat(data, 70<<10/len(data))
	for _, tt := range []struct {
		name, log string
		recovery  bool // a recovery file is there
		want      bool
	}{
		{"finalized", open + data + closeRec + checkpoint, false, false},
		{"finalized, the close record and checkpoint only", closeRec + checkpoint, false, false},
		{"finalized, longer than the tail read", long + closeRec + checkpoint, false, false},
		{"cut before the close record", open + data + checkpoint, false, true},
		{"cut after the close record", open + data + closeRec, false, true},
		{"cut in the last line", open + closeRec + checkpoint[:10], false, true},
		{"a checkpoint before the close record", open + checkpoint + closeRec, false, true},
		{"one line", open, false, true},
		{"not records", "x\ny\n", false, true},
		{"cut, recovered already", open + data, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			pty := filepath.Join(root, "run", "sess", vocab.PTYDir)
			mustOK(t, os.MkdirAll(pty, 0o700))
			mustOK(t, os.WriteFile(filepath.Join(pty, vocab.LogFile), []byte(tt.log), 0o600))
			if tt.recovery {
				mustOK(t, os.WriteFile(filepath.Join(pty, vocab.RecoveryFile), []byte(open), 0o600))
			}
			d, err := openSessionDirs(root, "run", "sess")
			mustOK(t, err)
			defer d.close()
			got, err := needsRecovery(d)
			if err != nil || got != tt.want {
				t.Errorf("needsRecovery = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestRecoveryDigestsFromTheChainedOffset: the recovery states the digest
// of the file's first n bytes and, for the typescript, the length and
// digest of the bytes from the chained offset to n: all of them from 0,
// none (a length of 0) at n, and no statement for an offset outside the
// file. Bytes past n (the file grew since it was measured) are in
// neither.
func TestRecoveryDigestsFromTheChainedOffset(t *testing.T) {
	file := []byte("0123456789")
	const n = 8 // the size measured; "89" came after
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	for _, tt := range []struct {
		name       string
		typescript bool
		off        int64
		want       map[string]string // the unaccounted attributes; nil: none
	}{
		{"from 0", true, 0, map[string]string{vocab.AttrUnaccountedOff: "0", vocab.AttrUnaccountedLen: "8", vocab.AttrUnaccountedSHA256: sum(file[:n])}},
		{"inside", true, 5, map[string]string{vocab.AttrUnaccountedOff: "5", vocab.AttrUnaccountedLen: "3", vocab.AttrUnaccountedSHA256: sum(file[5:n])}},
		{"at the end", true, n, map[string]string{vocab.AttrUnaccountedOff: "8", vocab.AttrUnaccountedLen: "0", vocab.AttrUnaccountedSHA256: sum(nil)}},
		{"past the end", true, n + 1, nil},
		{"no chained offset", true, -1, nil},
		{"the timing file", false, 5, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			into := map[string]string{}
			mustOK(t, digestForRecovery(bytes.NewReader(file), n, tt.typescript, tt.off, vocab.AttrTSSHA256, into))
			if into[vocab.AttrTSSHA256] != sum(file[:n]) {
				t.Errorf("whole-file digest %s, want the first %d bytes' %s", into[vocab.AttrTSSHA256], n, sum(file[:n]))
			}
			for _, k := range []string{vocab.AttrUnaccountedOff, vocab.AttrUnaccountedLen, vocab.AttrUnaccountedSHA256} {
				got, ok := into[k]
				want, wantOK := tt.want[k]
				if ok != wantOK || got != want {
					t.Errorf("%s = %q (present %v), want %q (present %v)", k, got, ok, want, wantOK)
				}
			}
		})
	}
}

// TestRecoveryScanStopsAtItsBound: the startup scan lists up to its bound
// of session folders and says so when there were more; folders that are
// not sessions (a file, an invalid name) do not count.
func TestRecoveryScanStopsAtItsBound(t *testing.T) {
	root := t.TempDir()
	for _, sess := range []string{"a", "b", "c"} {
		mustOK(t, os.MkdirAll(filepath.Join(root, "run", sess), 0o700))
	}
	mustOK(t, os.WriteFile(filepath.Join(root, "run", "not-a-folder"), nil, 0o600))
	mustOK(t, os.MkdirAll(filepath.Join(root, "run", "bad name"), 0o700))
	if found, err := listSessions(root, 3); err != nil || len(found) != 3 {
		t.Errorf("three sessions under a bound of 3: %d listed, %v; want all three and no error", len(found), err)
	}
	found, err := listSessions(root, 2)
	if len(found) != 2 || err == nil || !strings.Contains(err.Error(), "bound of 2 sessions") {
		t.Errorf("three sessions under a bound of 2: %d listed, %v; want two and the bound named", len(found), err)
	}
}
