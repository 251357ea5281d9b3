package recorder_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// TestRecoveryStatesTheUncoveredTail: the recovery record states the
// typescript bytes no data record covers, from the chained offset to the
// end of the file, with their digest (none: a length of 0 at the end), and
// verify repeats it.
func TestRecoveryStatesTheUncoveredTail(t *testing.T) {
	signer := recordertest.Signer()
	for _, tail := range []string{"", "typed after the last record\r\n"} {
		dir := recordertest.Unfinalized(t, t.TempDir(), "run-u", "sess-u", signer, nil, nil)
		ts := filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile)
		f, err := os.OpenFile(ts, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(tail)
		f.Close()
		if err := recordertest.Recover(dir, signer); err != nil {
			t.Fatal(err)
		}
		attrs := recoveryAttrs(t, dir)
		covered := len(recordertest.UnfinalizedHeader + recordertest.UnfinalizedBody)
		sum := sha256.Sum256([]byte(tail))
		want := map[string]string{
			vocab.AttrUnaccountedOff:    strconv.Itoa(covered),
			vocab.AttrUnaccountedLen:    strconv.Itoa(len(tail)),
			vocab.AttrUnaccountedSHA256: hex.EncodeToString(sum[:]),
			vocab.AttrTSSize:            strconv.Itoa(covered + len(tail)),
		}
		for k, v := range want {
			if attrs[k] != v {
				t.Errorf("tail %q: recovery attribute %s = %q, want %q", tail, k, attrs[k], v)
			}
		}
		rep := evidence.Verify(dir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
		wantMsg := strconv.Itoa(len(tail)) + " typescript bytes from offset " + strconv.Itoa(covered) + " are not covered by the log"
		found := false
		for _, a := range rep.Anomalies {
			found = found || (a.Kind == evidence.KindRecovered && bytes.Contains([]byte(a.Msg), []byte(wantMsg)))
		}
		if !found {
			t.Errorf("tail %q: verify does not repeat %q: %v", tail, wantMsg, rep.Anomalies)
		}
	}
}

// recoveryAttrs returns the attributes of dir's recovery record.
func recoveryAttrs(t *testing.T, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.RecoveryFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec integrity.Record
	if err := json.Unmarshal(b[:bytes.IndexByte(b, '\n')], &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Attrs
}

// TestRecoveryReadsTheUnsignedTailUpToItsBound: the recovery digests a
// typescript that runs exactly MaxUnsignedTail past the last signed size,
// and names it as not read one byte further (a file grown past what the
// recorder could have written unsigned is not hashed at startup). The
// tail is a hole, so the test writes nothing.
func TestRecoveryReadsTheUnsignedTailUpToItsBound(t *testing.T) {
	signer := recordertest.Signer()
	for past, wantNotRead := range map[int64]bool{0: false, 1: true} {
		dir := recordertest.Unfinalized(t, t.TempDir(), "run-b", "sess-b", signer, nil, nil)
		signed := evidence.Verify(dir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{}).SignedTSSize
		if signed <= 0 {
			t.Fatalf("the unfinalized fixture has no signed typescript size (%d)", signed)
		}
		ts := filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile)
		if err := os.Truncate(ts, signed+evidence.MaxUnsignedTail+past); err != nil {
			t.Fatal(err)
		}
		if err := recordertest.Recover(dir, signer); err != nil {
			t.Fatal(err)
		}
		a := recoveryAttrs(t, dir)
		notRead, ok := a[vocab.AttrNotRead]
		if ok != wantNotRead || (ok && !strings.Contains(notRead, vocab.TypescriptFile)) {
			t.Errorf("%d bytes past the bound: not_read %q (present %v), want present %v naming the typescript", past, notRead, ok, wantNotRead)
		}
		if _, digested := a[vocab.AttrTSSHA256]; digested == wantNotRead {
			t.Errorf("%d bytes past the bound: typescript digest present %v, want %v", past, digested, !wantNotRead)
		}
		// A file the restart did not read, the manifest cannot list: the
		// record announces none, and none is written.
		_, statErr := os.Lstat(filepath.Join(dir, vocab.ManifestFile))
		if announced := a[vocab.AttrManifest] != ""; announced == wantNotRead || (statErr == nil) != announced {
			t.Errorf("%d bytes past the bound: manifest announced %v, written %v (%v); want both %v", past, announced, statErr == nil, statErr, !wantNotRead)
		}
	}
}

// TestRecoveryNeedsOneRecordThatChains: a log whose only record is the
// open record is recovered from it (record 0 is what the sidecar vouches
// for); a log with no record that checks out is refused, naming why.
func TestRecoveryNeedsOneRecordThatChains(t *testing.T) {
	signer := recordertest.Signer()
	for _, tt := range []struct {
		name    string
		keep    func(log []byte) []byte
		wantErr string
	}{
		{"the open record only", func(log []byte) []byte { return log[:bytes.IndexByte(log, '\n')+1] }, ""},
		{"no record", func([]byte) []byte { return []byte("not a record\n") }, "no record checks out"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := recordertest.Unfinalized(t, t.TempDir(), "run-o", "sess-o", signer, nil, nil)
			path := filepath.Join(dir, vocab.PTYDir, vocab.LogFile)
			log, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tt.keep(log), 0o600); err != nil {
				t.Fatal(err)
			}
			err = recordertest.Recover(dir, signer)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("recover: %v", err)
				}
				if a := recoveryAttrs(t, dir); a[vocab.AttrLastRecord] != "0" {
					t.Errorf("last_record %q, want 0 (the open record)", a[vocab.AttrLastRecord])
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("recover = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
