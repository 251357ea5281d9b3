package recorder

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/sessionkey"
)

// testPool provisions n session keys under a fresh state folder and opens
// the pool, its signer this test binary (TestMain).
func testPool(t testing.TB, n int) (*sessionkey.Pool, string, gossh.Signer) {
	t.Helper()
	ca := testutil.NewSigner()
	state := t.TempDir()
	now := time.Now()
	if n > 0 {
		if _, _, err := sessionkey.Provision(filepath.Join(state, sessionkey.Dir), sessionkey.Provisioning{CA: ca, Count: n, FirstSerial: 1000, ValidAfter: now.Add(-time.Hour), ValidBefore: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := sessionkey.Open(state, sessionkey.SignerCommand{Path: os.Args[0], Env: []string{testSignerEnv + "=1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, state, ca
}

// openRecord returns the attributes of dir's open record.
func openRecord(t *testing.T, dir string) map[string]string {
	t.Helper()
	rs := logRecords(t, dir)
	if len(rs) == 0 || rs[0].Type != vocab.TypeOpen {
		t.Fatalf("no open record in %s", dir)
	}
	return rs[0].Attrs
}

// sigKey is the public key an armored SSHSIG carries.
func sigKey(t *testing.T, armored string, namespace string, msg []byte) gossh.PublicKey {
	t.Helper()
	pub, err := integrity.VerifySSHSIG(armored, namespace, msg)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// A session with a key of its own: the open record carries the
// certificate, every checkpoint and the manifest are signed by it, and
// once the session is closed the key is gone, file and signer both.
func TestSessionSignsWithItsOwnKey(t *testing.T) {
	pool, state, ca := testPool(t, 2)
	opts := testOptions()
	opts.SessionKeys = pool
	s := createSession(t, t.TempDir(), Meta{RunID: "run-k", SessionID: "sess-k"}, opts)
	leaves(s, evidence.StatusTampered) // the cleanup's verifier is given the host key alone
	if s.key == nil {
		t.Fatal("the session has no key of its own")
	}
	cert := s.key.PublicKey().(*gossh.Certificate)
	pid := s.key.SignerPID()
	mustOK(t, s.Output([]byte("secret work\r\n")))
	mustOK(t, s.Close(0))

	open := openRecord(t, s.Dir())
	if open[vocab.AttrSigner] != vocab.SignerSessionKey || open[vocab.AttrSignerSerial] != "1000" ||
		open[vocab.AttrSignerCert] != strings.TrimSpace(string(gossh.MarshalAuthorizedKey(cert))) {
		t.Fatalf("open record %v: want the session key's certificate and serial", open)
	}
	rep := evidence.Verify(s.Dir(), evidence.Keys{Authorities: []evidence.Authority{{Key: ca.PublicKey(), Principals: []string{vocab.SignerPrincipal}}}}, evidence.Options{})
	if !rep.OK() {
		t.Fatalf("the session trusting its CA: %s %v", rep.Status, rep.Anomalies)
	}
	if rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: []gossh.PublicKey{testOptions().Signer.PublicKey()}}, evidence.Options{}); rep.OK() {
		t.Fatal("the session verifies with the host key, which signed none of it")
	}
	manifest, err := os.ReadFile(filepath.Join(s.Dir(), vocab.ManifestFile))
	mustOK(t, err)
	sig, err := os.ReadFile(filepath.Join(s.Dir(), vocab.ManifestSigFile))
	mustOK(t, err)
	if got := sigKey(t, string(sig), integrity.ManifestNamespace, manifest); !bytes.Equal(got.Marshal(), cert.Marshal()) {
		t.Fatal("the manifest is not signed by the session's certificate")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the session's signer %d runs after the close (kill 0: %v)", pid, err)
	}
	for _, sub := range []string{sessionkey.ActiveDir, sessionkey.PoolDir} {
		entries, err := os.ReadDir(filepath.Join(state, sessionkey.Dir, sub))
		mustOK(t, err)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "00000000000000001000.") {
				t.Errorf("%s/%s is still there after the session was sealed", sub, e.Name())
			}
		}
	}
}

// An empty pool refuses the session, leaving no folder; with the fallback
// allowed the host key signs it, and the open record says why.
func TestEmptyPool(t *testing.T) {
	pool, _, _ := testPool(t, 0)
	opts := testOptions()
	opts.SessionKeys = pool
	root := t.TempDir()
	if _, err := Create(root, Meta{RunID: "run-e", SessionID: "refused"}, opts); !errors.Is(err, ErrNoSessionKey) || !errors.Is(err, sessionkey.ErrPoolEmpty) {
		t.Fatalf("Create with an empty pool = %v, want ErrNoSessionKey for the empty pool", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "run-e", "refused")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused session left its folder (lstat: %v)", err)
	}
	opts.HostKeyFallback = true
	s := createSession(t, root, Meta{RunID: "run-e", SessionID: "fallback"}, opts)
	if !errors.Is(s.KeyFallback(), sessionkey.ErrPoolEmpty) {
		t.Errorf("KeyFallback = %v, want the empty pool", s.KeyFallback())
	}
	mustOK(t, s.Close(0))
	if open := openRecord(t, s.Dir()); open[vocab.AttrSigner] != vocab.SignerHostKey || open[vocab.AttrSignerFallback] != vocab.FallbackPoolEmpty {
		t.Fatalf("open record %v: want the host key, and the fallback's reason", open)
	}
}

// A session a crash cut is recovered with its own key, left in active/,
// which then goes; where the key is gone, the host key signs the
// statement and the record says so.
func TestRecoverySignsWithTheSessionsKey(t *testing.T) {
	for _, keyGone := range []bool{false, true} {
		t.Run(map[bool]string{false: "key there", true: "key gone"}[keyGone], func(t *testing.T) {
			pool, state, ca := testPool(t, 1)
			opts := testOptions()
			opts.SessionKeys = pool
			root := t.TempDir()
			s, err := Create(root, Meta{RunID: "run-c", SessionID: "sess-c"}, opts)
			mustOK(t, err)
			cert := s.key.PublicKey()
			mustOK(t, s.Output([]byte("cut\r\n")))
			crash(t, s)
			active := filepath.Join(state, sessionkey.Dir, sessionkey.ActiveDir)
			if keyGone {
				entries, _ := os.ReadDir(active)
				for _, e := range entries {
					mustOK(t, os.Remove(filepath.Join(active, e.Name())))
				}
			}
			restarted, err := sessionkey.Open(state, sessionkey.SignerCommand{Path: os.Args[0], Env: []string{testSignerEnv + "=1"}})
			mustOK(t, err)
			defer restarted.Close()
			opts.SessionKeys = restarted
			out, err := recoverAll(root, opts)
			mustOK(t, err)
			if len(out) != 1 || out[0].Err != nil || out[0].ManifestErr != nil || out[0].KeyDestroyErr != nil || (out[0].KeyErr != nil) != keyGone {
				t.Fatalf("outcomes %+v", out)
			}
			stmt, err := os.ReadFile(filepath.Join(s.Dir(), vocab.PTYDir, vocab.RecoveryFile))
			mustOK(t, err)
			lines := bytes.Split(bytes.TrimSuffix(stmt, []byte("\n")), []byte("\n"))
			var rec, cp integrity.Record
			mustOK(t, json.Unmarshal(lines[0], &rec))
			mustOK(t, json.Unmarshal(lines[1], &cp))
			want := cert
			if keyGone {
				want = testOptions().Signer.PublicKey()
				if rec.Attrs[vocab.AttrSignerFallback] != vocab.FallbackKeyGone {
					t.Errorf("recovery record %v: want %s=%s", rec.Attrs, vocab.AttrSignerFallback, vocab.FallbackKeyGone)
				}
			}
			if got := sigKey(t, cp.Sig, integrity.HeadNamespace, integrity.HeadMessage("run-c", "sess-c", rec.Seq, cp.Prev)); !bytes.Equal(got.Marshal(), want.Marshal()) {
				t.Errorf("the recovery statement is signed by %s, want %s", gossh.FingerprintSHA256(got), gossh.FingerprintSHA256(want))
			}
			sig, err := os.ReadFile(filepath.Join(s.Dir(), vocab.ManifestSigFile))
			mustOK(t, err)
			manifest, err := os.ReadFile(filepath.Join(s.Dir(), vocab.ManifestFile))
			mustOK(t, err)
			if got := sigKey(t, string(sig), integrity.ManifestNamespace, manifest); !bytes.Equal(got.Marshal(), want.Marshal()) {
				t.Errorf("the recovered session's manifest is signed by %s, want %s", gossh.FingerprintSHA256(got), gossh.FingerprintSHA256(want))
			}
			if entries, _ := os.ReadDir(active); len(entries) != 0 {
				t.Errorf("active/ holds %d files after the recovery sealed the session", len(entries))
			}
			// The examiner's verdict: the cut, stated, trusting the CA
			// (and the host key, where it signed the statement).
			keys := evidence.Keys{Authorities: []evidence.Authority{{Key: ca.PublicKey(), Principals: []string{vocab.SignerPrincipal}}}}
			if keyGone {
				keys.Trusted = []gossh.PublicKey{testOptions().Signer.PublicKey()}
			}
			rep := evidence.Verify(s.Dir(), keys, evidence.Options{})
			if rep.Status != evidence.StatusUnfinalized || len(rep.Anomalies) != 2 || rep.Anomalies[1].Kind != evidence.KindRecovered {
				t.Errorf("the recovered session verifies %s %v, want unfinalized with its recovery statement", rep.Status, rep.Anomalies)
			}
		})
	}
}

// crash makes s durable and signed, then lets its files go without a
// close record, as a killed sidecar leaves them; its signer child dies
// with the sidecar.
func crash(t *testing.T, s *Session) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.tick != nil {
		s.tick.Stop()
	}
	mustOK(t, s.checkpointAndSync())
	mustOK(t, s.closeRecordFiles())
	mustOK(t, s.dirs.close())
	s.releaseReserve()
	s.unwatchDisk()
	if s.key != nil {
		syscall.Kill(s.key.SignerPID(), syscall.SIGKILL)
	}
}

// A close that could not write its closing records (here, a log that can
// take no write) leaves the session unsealed: its key's signer ends, but
// the key stays in active/ for the next start's recovery, which signs
// the cut with it, so an examiner who trusts the CA alone reads the cut,
// not a forgery.
func TestUnsealedCloseKeepsTheKeyForTheRecovery(t *testing.T) {
	pool, state, ca := testPool(t, 1)
	opts := testOptions()
	opts.SessionKeys = pool
	root := t.TempDir()
	s, err := Create(root, Meta{RunID: "run-u", SessionID: "sess-u"}, opts)
	mustOK(t, err)
	pid := s.key.SignerPID()
	mustOK(t, s.Output([]byte("before the log went away\r\n")))
	s.mu.Lock()
	mustOK(t, s.checkpointAndSync())
	s.log.Close() // every later write of the log fails
	s.mu.Unlock()
	if err := s.Close(0); err == nil {
		t.Fatal("Close with a log that takes no write succeeded")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the unsealed session's signer %d still runs (kill 0: %v)", pid, err)
	}
	active := filepath.Join(state, sessionkey.Dir, sessionkey.ActiveDir)
	if entries, _ := os.ReadDir(active); len(entries) != 2 {
		t.Fatalf("active/ holds %d files after an unsealed close, want the key and its certificate", len(entries))
	}
	out, err := recoverAll(root, opts)
	mustOK(t, err)
	if len(out) != 1 || out[0].Err != nil || out[0].KeyErr != nil {
		t.Fatalf("recovery outcomes %+v, want the session recovered with its own key", out)
	}
	if entries, _ := os.ReadDir(active); len(entries) != 0 {
		t.Errorf("active/ holds %d files after the recovery sealed the session", len(entries))
	}
	rep := evidence.Verify(s.Dir(), evidence.Keys{Authorities: []evidence.Authority{{Key: ca.PublicKey(), Principals: []string{vocab.SignerPrincipal}}}}, evidence.Options{})
	if rep.Status != evidence.StatusUnfinalized || !hasRecovered(rep) {
		t.Fatalf("trusting the CA alone: %s %v, want unfinalized with the recovery statement", rep.Status, rep.Anomalies)
	}
}

func hasRecovered(rep *evidence.Report) bool {
	for _, a := range rep.Anomalies {
		if a.Kind == evidence.KindRecovered {
			return true
		}
	}
	return false
}
