package examine_test

import (
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// sessionKey is a session key's signer: a fresh key with a user
// certificate of serial by ca, valid now.
func sessionKey(t *testing.T, ca gossh.Signer, serial uint64, edit ...func(*gossh.Certificate)) gossh.Signer {
	t.Helper()
	key := testutil.NewSigner()
	cert := &gossh.Certificate{Key: key.PublicKey(), Serial: serial, CertType: gossh.UserCert, KeyId: "session",
		ValidPrincipals: []string{vocab.SignerPrincipal},
		ValidAfter:      uint64(time.Now().Add(-time.Hour).Unix()), ValidBefore: uint64(time.Now().Add(time.Hour).Unix())}
	for _, e := range edit {
		e(cert)
	}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	s, err := gossh.NewCertSigner(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestVerifyRunSerialReused: a session key signs one session. Two sessions
// of a run signed with one serial (the same key replayed, or a stolen
// one's certificate carried by a forged session) each verify alone, and
// are each serial-reused in the run; sessions of distinct serials, and a
// host key's sessions, are not.
func TestVerifyRunSerialReused(t *testing.T) {
	ca := testutil.NewSigner()
	keys, err := evidence.ParseKeys([]byte(vocab.SignerPrincipal+" cert-authority "+string(gossh.MarshalAuthorizedKey(ca.PublicKey()))), "allowed_signers")
	if err != nil {
		t.Fatal(err)
	}
	keys.Trusted = recordertest.Trusted()
	record := func(root, id string, signer gossh.Signer) {
		s, err := recorder.Create(root, recorder.Meta{RunID: "run-1", SessionID: id}, recorder.Options{Signer: signer})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Output([]byte("id\r\n")); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(0); err != nil {
			t.Fatal(err)
		}
	}

	root := t.TempDir()
	record(root, "sess-1", sessionKey(t, ca, 7))
	record(root, "sess-2", sessionKey(t, ca, 8))
	record(root, "sess-3", recordertest.Signer())
	record(root, "sess-4", recordertest.Signer())
	if rr := examine.VerifyRun(filepath.Join(root, "run-1"), keys, evidence.Options{}); !rr.OK() {
		t.Fatalf("sessions of distinct serials and host-key sessions: anomalies %v, sessions %v", rr.Anomalies, sessionAnomalies(rr))
	}

	root = t.TempDir()
	replayed := sessionKey(t, ca, 7)
	record(root, "sess-1", replayed)
	record(root, "sess-2", sessionKey(t, ca, 8))
	record(root, "sess-3", replayed)
	rr := examine.VerifyRun(filepath.Join(root, "run-1"), keys, evidence.Options{})
	if rr.OK() || len(rr.Sessions) != 3 {
		t.Fatalf("a serial signing two sessions passed: OK %v, %d sessions", rr.OK(), len(rr.Sessions))
	}
	checkReused(t, rr)

	// A session the CA's certificate of that serial does not vouch for
	// (not yet valid when it began) fails alone, and casts no doubt on
	// the session the serial's key did sign.
	root = t.TempDir()
	record(root, "sess-1", sessionKey(t, ca, 7))
	record(root, "sess-2", sessionKey(t, ca, 8))
	record(root, "sess-3", sessionKey(t, ca, 7, func(c *gossh.Certificate) { c.ValidAfter = uint64(time.Now().Add(time.Hour).Unix()) }))
	rr = examine.VerifyRun(filepath.Join(root, "run-1"), keys, evidence.Options{})
	for _, s := range rr.Sessions {
		if len(s.Anomalies) > 0 || s.Report.OK() == (s.SessionID == "sess-3") {
			t.Errorf("%s beside a session its serial does not vouch for: verdict %s %v, run-level %v", s.SessionID, s.Report.Status, s.Report.Anomalies, s.Anomalies)
		}
	}
}

// checkReused holds a run of sessions sess-1 and sess-3 of serial 7 and
// sess-2 of serial 8 to its verdict: each verifies alone, and the two of
// serial 7 are each serial-reused, naming both.
func checkReused(t *testing.T, rr *examine.RunReport) {
	t.Helper()
	for _, s := range rr.Sessions {
		reused := len(s.Anomalies) == 1 && s.Anomalies[0].Kind == evidence.KindSerialReused &&
			strings.Contains(s.Anomalies[0].Msg, `"sess-1", "sess-3"`) && strings.Contains(s.Anomalies[0].Msg, "serial 7")
		if !s.Report.OK() || reused != (s.SessionID != "sess-2") || (!reused && len(s.Anomalies) > 0) {
			t.Errorf("%s: verdict %s, run-level %v; want ok alone, and serial-reused naming sess-1 and sess-3 on those two", s.SessionID, s.Report.Status, s.Anomalies)
		}
	}
}

func sessionAnomalies(rr *examine.RunReport) map[string][]evidence.Anomaly {
	out := map[string][]evidence.Anomaly{}
	for _, s := range rr.Sessions {
		out[s.SessionID] = append(append(out[s.SessionID], s.Report.Anomalies...), s.Anomalies...)
	}
	return out
}

// TestVerifyRunSerialOutOfOrder: the pool hands keys out lowest serial
// first, so a session re-signed with a key copied from the pool later
// carries a serial above a session started well after it: that session is
// serial-out-of-order in its run; the sessions in order are not. (One
// 2.1 s wait: the order is held only past the skew of sessions opened
// together.)
func TestVerifyRunSerialOutOfOrder(t *testing.T) {
	ca := testutil.NewSigner()
	keys, err := evidence.ParseKeys([]byte(vocab.SignerPrincipal+" cert-authority "+string(gossh.MarshalAuthorizedKey(ca.PublicKey()))), "allowed_signers")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	record := func(id string, serial uint64) {
		s, err := recorder.Create(root, recorder.Meta{RunID: "run-1", SessionID: id}, recorder.Options{Signer: sessionKey(t, ca, serial)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(0); err != nil {
			t.Fatal(err)
		}
	}
	record("sess-1", 7)
	record("forged", 9) // an early session, re-signed with a pool key of a later serial
	time.Sleep(2100 * time.Millisecond)
	record("sess-3", 8)
	rr := examine.VerifyRun(filepath.Join(root, "run-1"), keys, evidence.Options{})
	for _, s := range rr.Sessions {
		out := len(s.Anomalies) == 1 && s.Anomalies[0].Kind == evidence.KindSerialOutOfOrder && strings.Contains(s.Anomalies[0].Msg, `"sess-3"`)
		if !s.Report.OK() || out != (s.SessionID == "forged") || (!out && len(s.Anomalies) > 0) {
			t.Errorf("%s: verdict %s, run-level %v; want ok alone, and serial-out-of-order on the forged session only", s.SessionID, s.Report.Status, s.Anomalies)
		}
	}
	if rr.OK() {
		t.Error("the run with a session out of its serials' order is ok")
	}
}
