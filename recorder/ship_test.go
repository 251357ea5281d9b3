package recorder

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/s3test"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestShippedRecordsMakeNoCheckpointOfTheirOwn: an idle shipped session
// does not sign a checkpoint for each acknowledgement (which would be
// shipped and acknowledged in turn, for as long as the session lasts);
// its shipped records are signed by the close.
func TestShippedRecordsMakeNoCheckpointOfTheirOwn(t *testing.T) {
	opts := testOptions()
	opts.Shipper, _ = testShipper(t)
	root := t.TempDir()
	s, err := Create(root, Meta{RunID: "r", SessionID: "idle"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Output([]byte("one line\r\n")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "r", "idle")
	count := func(typ string) int {
		n := 0
		for _, r := range logRecords(t, dir) {
			if r.Type == typ {
				n++
			}
		}
		return n
	}
	if !testutil.WaitUntil(func() bool { return count(vocab.TypeShipped) >= 2 }) {
		t.Fatal("the first point's segments were not acknowledged")
	}
	before := count(vocab.TypeCheckpoint)
	time.Sleep(3500 * time.Millisecond) // three ticks with nothing recorded but acknowledgements
	if after := count(vocab.TypeCheckpoint); after != before {
		t.Fatalf("%d checkpoints while idle, after %d: acknowledgements made checkpoints of their own", after, before)
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	// The close's checkpoint signs them: every record is signed.
	rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{opts.Signer.PublicKey()}}, evidence.Options{})
	if !rep.OK() || rep.SignedRecords != rep.Records || rep.ShippedSegments < 2 {
		t.Fatalf("status %s, %d of %d records signed, %d shipped records: %v", rep.Status, rep.SignedRecords, rep.Records, rep.ShippedSegments, rep.Anomalies)
	}
}

// TestTheCertificateLeavesTheBoxFirst: a session signed by its own key
// ships, as the first segment of its log, the open record with that key's
// certificate, before anything else of the session.
func TestTheCertificateLeavesTheBoxFirst(t *testing.T) {
	pool, _, _ := testPool(t, 2)
	opts := testOptions()
	opts.SessionKeys = pool
	var g *s3test.Gateway
	opts.Shipper, g = testShipper(t)
	root := t.TempDir()
	s, err := Create(root, Meta{RunID: "r", SessionID: "cert"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(0)
	key := "segments/r/cert/" + vocab.PTYDir + "/" + vocab.LogFile + "/00000001"
	got := filepath.Join(t.TempDir(), "first")
	if !testutil.WaitUntil(func() bool {
		_, err := g.TryAWS("s3api", "get-object", "--bucket", g.Bucket, "--key", key, got)
		return err == nil
	}) {
		t.Fatal("the log's first segment was not shipped")
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := bytes.Cut(b, []byte("\n"))
	var open integrity.Record
	if err := json.Unmarshal(first, &open); err != nil {
		t.Fatal(err)
	}
	cert := open.Attrs[vocab.AttrSignerCert]
	if open.Type != vocab.TypeOpen || !strings.HasPrefix(cert, "ssh-ed25519-cert-v01@openssh.com ") {
		t.Fatalf("the first shipped record: %s %v", open.Type, open.Attrs)
	}
	if signer := s.signer.PublicKey(); !bytes.Equal(gossh.MarshalAuthorizedKey(signer), []byte(cert+"\n")) {
		t.Fatalf("the shipped certificate is not the session's signer")
	}
}
