package evidence_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// Sessions signed by one-time session keys, certified by a CA that is not
// on the sidecar (signer.go), and the forgeries a thief holding the host
// key, another session's key or a CA of his own can make of them. Every
// case fails if the check it names is switched off.

// certify issues a user certificate for a fresh key, serial serial, by ca,
// valid for an hour either side of now unless edit changes it, and returns
// the session key's signer, which presents the certificate.
func certify(t *testing.T, ca gossh.Signer, serial uint64, edit func(*gossh.Certificate)) gossh.Signer {
	t.Helper()
	return certifyKey(t, ca, testutil.NewSigner(), serial, edit)
}

// certifyKey is certify for a given key.
func certifyKey(t *testing.T, ca, key gossh.Signer, serial uint64, edit func(*gossh.Certificate)) gossh.Signer {
	t.Helper()
	now := time.Now()
	cert := &gossh.Certificate{
		Key: key.PublicKey(), Serial: serial, CertType: gossh.UserCert, KeyId: "session-" + strconv.FormatUint(serial, 10),
		ValidPrincipals: []string{vocab.SignerPrincipal},
		ValidAfter:      uint64(now.Add(-time.Hour).Unix()), ValidBefore: uint64(now.Add(time.Hour).Unix()),
	}
	if edit != nil {
		edit(cert)
	}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.NewCertSigner(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return signer
}

// recordSigned records a finalized session run-1/sess-1 under a fresh
// root, signed by signer, and returns its folder.
func recordSigned(t *testing.T, signer gossh.Signer) string {
	t.Helper()
	s, err := recorder.Create(t.TempDir(), recorder.Meta{RunID: "run-1", SessionID: "sess-1"}, recorder.Options{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Output([]byte("uid=0(root) gid=0(root)\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	return s.Dir()
}

// allowedSigners is the examiner's allowed_signers file trusting ca for
// session keys, read as verify --key reads it.
func allowedSigners(t *testing.T, ca gossh.Signer) (line string, keys evidence.Keys) {
	t.Helper()
	line = vocab.SignerPrincipal + " cert-authority " + string(gossh.MarshalAuthorizedKey(ca.PublicKey()))
	keys, err := evidence.ParseKeys([]byte(line), "allowed_signers")
	if err != nil {
		t.Fatal(err)
	}
	return line, keys
}

// resignLog rewrites the session's log as a thief holding signer would:
// each record through edit (nil: unchanged), the chain's hashes again, and
// every checkpoint signed by signer. The manifest, which the thief cannot
// make agree with the sealing checkpoint any more cheaply, is removed: its
// absence is a note, so the checkpoints' trust is the one finding.
func resignLog(t *testing.T, dir string, signer gossh.Signer, edit func(*integrity.Record)) {
	t.Helper()
	path := filepath.Join(dir, vocab.PTYDir, vocab.LogFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var run, session, prev string
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var r integrity.Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		if r.Type == vocab.TypeOpen {
			if edit != nil {
				edit(&r)
			}
			run, session = r.Attrs[vocab.AttrRunID], r.Attrs[vocab.AttrSessionID]
			prev = integrity.Seed(run, session)
		}
		r.Prev = prev
		if r.Type == vocab.TypeCheckpoint {
			if r.Sig, err = integrity.SignSSHSIG(signer, integrity.HeadNamespace, integrity.HeadMessage(run, session, r.Seq-1, r.Prev)); err != nil {
				t.Fatal(err)
			}
		}
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(line)
		prev = hex.EncodeToString(sum[:])
		out.Write(append(line, '\n'))
	}
	mustWrite(t, path, out.Bytes())
	for _, name := range []string{vocab.ManifestFile, vocab.ManifestSigFile} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// carryCert makes the open record name signer's certificate, as the
// recorder writes it.
func carryCert(signer gossh.Signer) func(*integrity.Record) {
	return func(r *integrity.Record) {
		cert := signer.PublicKey().(*gossh.Certificate)
		r.Attrs[vocab.AttrSigner] = vocab.SignerSessionKey
		r.Attrs[vocab.AttrSignerCert] = strings.TrimSpace(string(gossh.MarshalAuthorizedKey(cert)))
		r.Attrs[vocab.AttrSignerSerial] = strconv.FormatUint(cert.Serial, 10)
	}
}

// TestSessionKeyVerifiesWithItsCA: a session signed by its certified
// session key verifies with only its CA given, and the report names the
// signer and the serial; with only the host key given, nothing vouches
// for it.
func TestSessionKeyVerifiesWithItsCA(t *testing.T) {
	ca := testutil.NewSigner()
	dir := recordSigned(t, certify(t, ca, 7, nil))
	_, keys := allowedSigners(t, ca)
	rep := evidence.Verify(dir, keys, evidence.Options{})
	if !rep.OK() || rep.Signer != vocab.SignerSessionKey || rep.SignerSerial != "7" || len(rep.Notes) != 0 {
		t.Fatalf("session key with its CA given: status %s signer %q serial %q, anomalies %v, notes %v; want ok, session-key, 7",
			rep.Status, rep.Signer, rep.SignerSerial, rep.Anomalies, rep.Notes)
	}
	rep = verify(dir, recordertest.Trusted()...)
	if rep.Status != evidence.StatusTampered || len(rep.Anomalies) != 1 || rep.Anomalies[0].Kind != evidence.KindUntrustedKey ||
		!strings.Contains(rep.Anomalies[0].Msg, "certificate serial 7") {
		t.Errorf("session key with the host key alone: %s %v, want one untrusted-key naming the certificate", rep.Status, rep.Anomalies)
	}
}

// TestSessionKeyExpiredSinceVerifies: a certificate is held to its window
// at the session's start, as ssh-keygen -Y verify -O verify-time= holds
// it: one that has expired since still vouches for the session it signed.
func TestSessionKeyExpiredSinceVerifies(t *testing.T) {
	ca := testutil.NewSigner()
	now := time.Now()
	signer := certify(t, ca, 7, func(c *gossh.Certificate) {
		c.ValidAfter, c.ValidBefore = uint64(now.Add(-3*time.Hour).Unix()), uint64(now.Add(-time.Hour).Unix())
	})
	dir := recordSigned(t, signer)
	resignLog(t, dir, signer, func(r *integrity.Record) { r.Time = now.Add(-2 * time.Hour) })
	_, keys := allowedSigners(t, ca)
	if rep := evidence.Verify(dir, keys, evidence.Options{}); !rep.OK() {
		t.Errorf("a session signed within its certificate's window, which has ended since: %s %v, want ok", rep.Status, rep.Anomalies)
	}
}

// TestSessionKeyRecovery: the restarted sidecar signs a session key's
// session's recovery statement with its host key (the session key went
// with the process that held it), which vouches for it; another session's
// certified key does not.
func TestSessionKeyRecovery(t *testing.T) {
	ca, host := testutil.NewSigner(), recordertest.Signer()
	_, keys := allowedSigners(t, ca)
	keys.Trusted = []gossh.PublicKey{host.PublicKey()}
	// Valid when recordertest.Unfinalized's session begins.
	session := certify(t, ca, 7, func(c *gossh.Certificate) { c.ValidAfter, c.ValidBefore = 0, gossh.CertTimeInfinity })
	for _, tc := range []struct {
		name   string
		signer gossh.Signer
		want   evidence.Kind
	}{
		{"by the host key", host, evidence.KindRecovered},
		{"by another session's key", certify(t, ca, 8, nil), evidence.KindRecoveryInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attrs := map[string]string{}
			carryCert(session)(&integrity.Record{Attrs: attrs})
			dir := recordertest.Unfinalized(t, t.TempDir(), "run-1", "sess-1", session, attrs, nil)
			if err := recordertest.Recover(dir, tc.signer); err != nil {
				t.Fatal(err)
			}
			rep := evidence.Verify(dir, keys, evidence.Options{})
			if !hasKind(rep, tc.want, "") || (tc.want == evidence.KindRecovered && rep.Status != evidence.StatusUnfinalized) {
				t.Errorf("recovery %s: %s %v, want a %s", tc.name, rep.Status, rep.Anomalies, tc.want)
			}
		})
	}
}

// TestSessionKeyHeadWithSSHKeygen: the stock check of RECORD.md, "Session
// keys": ssh-keygen -Y verify takes the head with a cert-authority line at
// the session's start, and refuses it at a time outside the certificate's
// window, which is why -O verify-time is given; ssh-keygen -L shows the
// certificate's serial.
func TestSessionKeyHeadWithSSHKeygen(t *testing.T) {
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Skip("ssh-keygen (OpenSSH) is not installed: the stock check of a session key's head cannot be run")
	}
	ca := testutil.NewSigner()
	signer := certify(t, ca, 4242, nil)
	dir := recordSigned(t, signer)
	msg, sig, err := evidence.LastHead(dir)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := allowedSigners(t, ca)
	work := t.TempDir()
	for name, b := range map[string][]byte{"head.sig": []byte(sig), "allowed_signers": []byte(line),
		"session-cert.pub": gossh.MarshalAuthorizedKey(signer.PublicKey())} {
		mustWrite(t, filepath.Join(work, name), b)
	}
	started := evidence.Verify(dir, evidence.Keys{}, evidence.Options{}).Started
	check := func(at time.Time) ([]byte, error) {
		cmd := exec.Command(keygen, "-Y", "verify", "-f", filepath.Join(work, "allowed_signers"), "-I", vocab.SignerPrincipal,
			"-n", integrity.HeadNamespace, "-s", filepath.Join(work, "head.sig"), "-O", "verify-time="+at.UTC().Format("20060102150405"))
		cmd.Stdin = bytes.NewReader(msg)
		return cmd.CombinedOutput()
	}
	if out, err := check(started); err != nil {
		t.Fatalf("ssh-keygen -Y verify at the session's start: %v\n%s", err, out)
	}
	if out, err := check(started.Add(2 * time.Hour)); err == nil {
		t.Errorf("ssh-keygen -Y verify past the certificate's window accepted the head:\n%s", out)
	}
	out, err := exec.Command(keygen, "-L", "-f", filepath.Join(work, "session-cert.pub")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Serial: 4242") {
		t.Errorf("ssh-keygen -L: %v\n%s\nwant the serial 4242", err, out)
	}
}

// TestSessionKeyForgeries: what a thief can sign a session with, and the
// finding each is. The examiner trusts the host key (for sessions it
// signs, a pool run dry) and the CA of session keys.
func TestSessionKeyForgeries(t *testing.T) {
	ca, thiefCA, host := testutil.NewSigner(), testutil.NewSigner(), recordertest.Signer()
	_, keys := allowedSigners(t, ca)
	keys.Trusted = append(keys.Trusted, host.PublicKey())
	session := certify(t, ca, 7, nil)
	other := certify(t, ca, 8, nil)
	// The forger's tool itself: a log re-signed by its own signer is the
	// session it was, so each finding below is the signer's, not the tool's.
	genuine := recordSigned(t, session)
	resignLog(t, genuine, session, nil)
	if rep := evidence.Verify(genuine, keys, evidence.Options{}); !rep.OK() || len(rep.Notes) != 1 || rep.Notes[0].Kind != evidence.NoteManifestAbsent {
		t.Fatalf("a session re-signed by its own session key: %s %v %v, want ok with the manifest's absence noted", rep.Status, rep.Anomalies, rep.Notes)
	}
	for _, tc := range []struct {
		name  string
		dir   func(t *testing.T) string
		keys  func(evidence.Keys) evidence.Keys
		want  evidence.Kind
		about string // in the message
	}{
		{"re-signed with the host key", func(t *testing.T) string {
			dir := recordSigned(t, session)
			resignLog(t, dir, host, nil)
			return dir
		}, nil, evidence.KindCertificateInvalid, "not by the session key the open record names"},
		{"re-signed with another session's certified key", func(t *testing.T) string {
			dir := recordSigned(t, session)
			resignLog(t, dir, other, nil)
			return dir
		}, nil, evidence.KindCertificateInvalid, "not by the signer the open record names (the certificate serial 7"},
		{"a host key's session re-signed with a certified key", func(t *testing.T) string {
			dir := recordSigned(t, host)
			resignLog(t, dir, session, nil)
			return dir
		}, nil, evidence.KindCertificateInvalid, "not by the signer the open record names (a host key)"},
		{"recorded with a key of the thief's own CA", func(t *testing.T) string {
			return recordSigned(t, certify(t, thiefCA, 7, nil))
		}, nil, evidence.KindUntrustedKey, "no checkpoint is signed by a trusted key"},
		{"a certificate not yet valid at the session's start", func(t *testing.T) string {
			return recordSigned(t, certify(t, ca, 9, func(c *gossh.Certificate) { c.ValidAfter = uint64(time.Now().Add(time.Hour).Unix()) }))
		}, nil, evidence.KindCertificateInvalid, "not yet valid"},
		{"a certificate expired at the session's start", func(t *testing.T) string {
			return recordSigned(t, certify(t, ca, 9, func(c *gossh.Certificate) { c.ValidBefore = uint64(time.Now().Add(-time.Minute).Unix()) }))
		}, nil, evidence.KindCertificateInvalid, "expired"},
		{"a session dated before its certificate's window", func(t *testing.T) string {
			// Valid now, not when the open record says the session began:
			// the window is the session start's, not the examiner's clock.
			dir := recordSigned(t, session)
			resignLog(t, dir, session, func(r *integrity.Record) { r.Time = r.Time.Add(-2 * time.Hour) })
			return dir
		}, nil, evidence.KindCertificateInvalid, "not yet valid"},
		{"a certificate for another principal", func(t *testing.T) string {
			return recordSigned(t, certify(t, ca, 9, func(c *gossh.Certificate) { c.ValidPrincipals = []string{"root"} }))
		}, nil, evidence.KindCertificateInvalid, "names none of the principals"},
		{"a host certificate", func(t *testing.T) string {
			return recordSigned(t, certify(t, ca, 9, func(c *gossh.Certificate) { c.CertType = gossh.HostCert }))
		}, nil, evidence.KindCertificateInvalid, "not a user certificate"},
		{"a certificate whose CA signature is bad", func(t *testing.T) string {
			key := testutil.NewSigner()
			genuine := certifyKey(t, ca, key, 9, nil)
			dir := recordSigned(t, genuine)
			// The certificate of the open record and of every signature,
			// its serial changed after the CA signed it.
			cert := *genuine.PublicKey().(*gossh.Certificate)
			cert.Serial = 70
			forged, err := gossh.NewCertSigner(&cert, key)
			if err != nil {
				t.Fatal(err)
			}
			resignLog(t, dir, forged, carryCert(forged))
			return dir
		}, nil, evidence.KindCertificateInvalid, "signature does not verify"},
		{"an open record whose serial is not its certificate's", func(t *testing.T) string {
			dir := recordSigned(t, session)
			resignLog(t, dir, session, func(r *integrity.Record) { r.Attrs[vocab.AttrSignerSerial] = "8" })
			return dir
		}, nil, evidence.KindRecordMalformed, "not its certificate's serial 7"},
		{"a revoked session key", func(t *testing.T) string { return recordSigned(t, session) },
			func(k evidence.Keys) evidence.Keys {
				k.Revoked = []gossh.PublicKey{session.PublicKey().(*gossh.Certificate).Key}
				return k
			}, evidence.KindRevokedKey, "whose key is revoked"},
		{"a revoked CA", func(t *testing.T) string { return recordSigned(t, session) },
			func(k evidence.Keys) evidence.Keys {
				k.Revoked = []gossh.PublicKey{ca.PublicKey()}
				return k
			}, evidence.KindRevokedKey, "whose certificate authority is revoked"},
		{"a manifest re-signed with the host key", func(t *testing.T) string {
			dir := recordSigned(t, session)
			resign(t, dir, readManifest(t, dir), host, integrity.ManifestNamespace)
			return dir
		}, nil, evidence.KindCertificateInvalid, "the manifest is signed by the key"},
		{"a manifest re-signed with another session's certified key", func(t *testing.T) string {
			dir := recordSigned(t, session)
			resign(t, dir, readManifest(t, dir), other, integrity.ManifestNamespace)
			return dir
		}, nil, evidence.KindCertificateInvalid, "the manifest is signed by the certificate serial 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := keys
			if tc.keys != nil {
				k = tc.keys(keys)
			}
			rep := evidence.Verify(tc.dir(t), k, evidence.Options{})
			if rep.Status != evidence.StatusTampered || len(rep.Anomalies) == 0 || rep.Anomalies[0].Kind != tc.want ||
				!strings.Contains(rep.Anomalies[0].Msg, tc.about) {
				t.Errorf("verdict %s %v; want tampered, first a %s saying %q", rep.Status, rep.Anomalies, tc.want, tc.about)
			}
		})
	}
}
