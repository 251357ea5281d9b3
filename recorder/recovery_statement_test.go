package recorder_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
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
		b, err := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.RecoveryFile))
		if err != nil {
			t.Fatal(err)
		}
		var rec integrity.Record
		if err := json.Unmarshal(b[:bytes.IndexByte(b, '\n')], &rec); err != nil {
			t.Fatal(err)
		}
		covered := len(recordertest.UnfinalizedHeader + recordertest.UnfinalizedBody)
		sum := sha256.Sum256([]byte(tail))
		want := map[string]string{
			vocab.AttrUnaccountedOff:    strconv.Itoa(covered),
			vocab.AttrUnaccountedLen:    strconv.Itoa(len(tail)),
			vocab.AttrUnaccountedSHA256: hex.EncodeToString(sum[:]),
			vocab.AttrTSSize:            strconv.Itoa(covered + len(tail)),
		}
		for k, v := range want {
			if rec.Attrs[k] != v {
				t.Errorf("tail %q: recovery attribute %s = %q, want %q", tail, k, rec.Attrs[k], v)
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
