package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// appendForgedData appends to dir's log a chained, unsigned data record
// claiming n typescript bytes at off, as anyone with write access could.
func appendForgedData(t *testing.T, dir string, off, n int64) {
	t.Helper()
	path := filepath.Join(dir, vocab.PTYDir, vocab.LogFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	sum := sha256.Sum256(lines[len(lines)-1])
	rec := integrity.Record{Seq: uint64(len(lines)), Prev: hex.EncodeToString(sum[:]), Time: time.Unix(1767225601, 0).UTC(),
		Type: vocab.TypeData, Data: &integrity.Data{Stream: vocab.StreamOut, Off: off, Len: n, SHA256: hex.EncodeToString(make([]byte, 32))}}
	line, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, append(append(b, line...), '\n'))
}

// TestVerifyDoesNotHashForgedClaim: a forged, unsigned data record
// claiming 4 TiB after the last checkpoint, over a sparse 5 TiB
// typescript. verify must state the claim as an anomaly without reading
// it (within the test's deadline; reading it would take hours).
func TestVerifyDoesNotHashForgedClaim(t *testing.T) {
	signer := newTestSigner(t)
	dir := recordertest.Unfinalized(t, t.TempDir(), "run-claim", "sess-claim", signer, nil, nil)
	const claim = 4 << 40
	appendForgedData(t, dir, 75, claim) // the typescript's end: header 61 + 14 body bytes
	makeSparse(t, filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile), 5<<40)

	done := make(chan *evidence.Report, 1)
	go func() {
		done <- evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}, evidence.Options{})
	}()
	var rep *evidence.Report
	select {
	case rep = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("verify still hashing a forged 4 TiB claim after 30 s")
	}
	var found bool
	for _, a := range rep.Anomalies {
		found = found || (a.File == vocab.LogFile && a.Seq == 5 && strings.Contains(a.Msg, "claims 4398046511104 typescript bytes at offset 75"))
	}
	if !found || rep.OK() {
		t.Errorf("verify: want an anomaly at record 5 stating the 4 TiB claim; got %+v", rep.Anomalies)
	}
}
