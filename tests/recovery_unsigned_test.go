package tests

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// TestRecoveryStatesUnsignedRecords recovers a session cut after records
// 3 and 4, which no checkpoint covered: the signed recovery record must
// say they were unsigned before the crash, and verify must report it.
func TestRecoveryStatesUnsignedRecords(t *testing.T) {
	signer := newTestSigner(t)
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-r", "sess-r", signer, nil, nil)
	if err := recordertest.Recover(dir, signer); err != nil {
		t.Fatal(err)
	}
	var rec integrity.Record
	first := logLines(mustRead(t, filepath.Join(dir, "pty", vocab.RecoveryFile)))[0]
	if err := json.Unmarshal(first, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Attrs["unsigned_records"] != "3-4" || rec.Attrs["last_signed_record"] != "2" {
		t.Errorf("recovery record attrs %v: want unsigned_records 3-4 and last_signed_record 2", rec.Attrs)
	}
	rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}, evidence.Options{})
	if msg := fmt.Sprint(rep.Anomalies); !strings.Contains(msg, "records 3-4 were not signed before the crash") {
		t.Errorf("verify does not report the records unsigned before the crash: %v", rep.Anomalies)
	}

	// A session whose every record was signed says so too.
	clean := recordertest.Unfinalized(t, t.TempDir(), "run-r", "sess-c", signer, nil, nil)
	edit(t, clean, vocab.LogFile, func(b []byte) []byte { return joinLines(logLines(b)[:3]) })
	if err := recordertest.Recover(clean, signer); err != nil {
		t.Fatal(err)
	}
	rep = evidence.Verify(clean, evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}, evidence.Options{})
	if msg := fmt.Sprint(rep.Anomalies); !strings.Contains(msg, "every record was signed before the crash") {
		t.Errorf("verify does not say every record was signed: %v", rep.Anomalies)
	}
}
