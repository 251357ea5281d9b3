package evidence

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/termsafe"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Who may sign a session. The open record, the session's first, names its
// signer: the host key (vocab.SignerHostKey, or nothing, in a session that
// predates session keys), or a one-time session key (SignerSessionKey)
// whose certificate it carries. A thief who holds the host key, or the key
// of another session, can re-sign a sealed session's every record; what he
// cannot change is that the session's own certificate is in its open
// record, made before the session began. So a session key's session is
// vouched for only by that very certificate, a host key's only by a plain
// key, and the certificate only while a CA given signed it for a
// principal given, with the session's start in its window.

// sessionSigner is what the open record says signs the session.
type sessionSigner struct {
	// cert is the session key's certificate (AttrSignerCert); nil for a
	// host key's session.
	cert *gossh.Certificate
}

// parseSigner reads the open record's signer attributes, or says what
// is wrong with them: a session key must come with its certificate and
// the certificate's serial, which the run-level check of reused serials
// reads (package examine), and a host key with neither.
func parseSigner(attrs map[string]string) (sessionSigner, error) {
	signer, certLine, serial := attrs[vocab.AttrSigner], attrs[vocab.AttrSignerCert], attrs[vocab.AttrSignerSerial]
	switch signer {
	case "", vocab.SignerHostKey:
		if certLine != "" || serial != "" {
			return sessionSigner{}, fmt.Errorf("open record of a session signed by the host key carries a session key's %s or %s", vocab.AttrSignerCert, vocab.AttrSignerSerial)
		}
		return sessionSigner{}, nil
	case vocab.SignerSessionKey:
	default:
		return sessionSigner{}, fmt.Errorf("open record names the signer %.32q; the sidecar writes %s or %s", signer, vocab.SignerSessionKey, vocab.SignerHostKey)
	}
	key, _, _, rest, err := gossh.ParseAuthorizedKey([]byte(certLine))
	cert, ok := key.(*gossh.Certificate)
	if err != nil || !ok || len(bytes.TrimSpace(rest)) > 0 {
		return sessionSigner{}, fmt.Errorf("open record of a session key's session has no certificate in %s", vocab.AttrSignerCert)
	}
	if serial != strconv.FormatUint(cert.Serial, 10) {
		return sessionSigner{}, fmt.Errorf("open record's %s %.32q is not its certificate's serial %d", vocab.AttrSignerSerial, serial, cert.Serial)
	}
	return sessionSigner{cert: cert}, nil
}

// untrusted says why the key that made a checkpoint's or the manifest's
// signature does not vouch for this session, or "" when it does: a plain
// key when it is trusted, not revoked, and the open record names the host
// key; a certificate by untrustedCert. A revoked key is refused even when
// it is also listed as trusted.
func (v *verifier) untrusted(pub gossh.PublicKey) (Kind, string) {
	return v.untrustedSigner(pub, false)
}

// untrustedSigner is untrusted; hostKeyToo lets a trusted plain key vouch
// for a session key's session as well: the recovery statement, which the
// restarted sidecar signs with the host key, the session key having gone
// with the process that held it.
func (v *verifier) untrustedSigner(pub gossh.PublicKey, hostKeyToo bool) (Kind, string) {
	if cert, ok := pub.(*gossh.Certificate); ok {
		return v.untrustedCert(cert)
	}
	if containsKey(v.keys.Revoked, pub) {
		return KindRevokedKey, fmt.Sprintf("signed by %s, which is revoked (@revoked in the keys given)", gossh.FingerprintSHA256(pub))
	}
	if !containsKey(v.keys.Trusted, pub) {
		return KindUntrustedKey, fmt.Sprintf("signed by %s, which is not a trusted key", gossh.FingerprintSHA256(pub))
	}
	if want := v.signer.cert; want != nil && !hostKeyToo {
		return KindCertificateInvalid, fmt.Sprintf("signed by the key %s, not by the session key the open record names (%s)", gossh.FingerprintSHA256(pub), describeCert(want))
	}
	return "", ""
}

// untrustedCert says why a session key's certificate does not vouch for
// this session, or "" when it does: it is a user certificate, neither it,
// its key nor its CA is revoked, a CA given signed it, the session's start
// (the open record's time) lies in its window, it names one of the CA's
// principals, and it is the certificate the open record carries. The
// window is checked at the session's start, as ssh-keygen -Y verify -O
// verify-time= does: a certificate that expired since still vouches for
// the session it signed then.
func (v *verifier) untrustedCert(cert *gossh.Certificate) (Kind, string) {
	what := describeCert(cert)
	switch {
	case containsKey(v.keys.Revoked, cert), containsKey(v.keys.Revoked, cert.Key):
		return KindRevokedKey, fmt.Sprintf("signed by %s, whose key is revoked (@revoked in the keys given)", what)
	case containsKey(v.keys.Revoked, cert.SignatureKey):
		return KindRevokedKey, fmt.Sprintf("signed by %s, whose certificate authority is revoked (@revoked in the keys given)", what)
	}
	ca := v.authority(cert.SignatureKey)
	if ca == nil {
		return KindUntrustedKey, fmt.Sprintf("signed by %s, whose certificate authority is not a trusted one (no cert-authority line of the keys given)", what)
	}
	if cert.CertType != gossh.UserCert {
		return KindCertificateInvalid, fmt.Sprintf("signed by %s, which is not a user certificate", what)
	}
	if len(cert.ValidPrincipals) == 0 {
		return KindCertificateInvalid, fmt.Sprintf("signed by %s, which names no principal", what)
	}
	checker := gossh.CertChecker{Clock: func() time.Time { return v.rep.Started }}
	if err := checker.CheckCert(cert.ValidPrincipals[0], cert); err != nil {
		return KindCertificateInvalid, fmt.Sprintf("signed by %s, which does not hold at the session's start %s (%s): %v",
			what, v.rep.Started.UTC().Format(time.RFC3339), certWindow(cert), err)
	}
	if !slices.ContainsFunc(cert.ValidPrincipals, func(p string) bool { return matchPatternList(p, ca.Principals) }) {
		return KindCertificateInvalid, fmt.Sprintf("signed by %s, which names none of the principals its CA is trusted for (%s)",
			what, termsafe.Escape(fmt.Sprint(ca.Principals)))
	}
	if want := v.signer.cert; want == nil || !bytes.Equal(want.Marshal(), cert.Marshal()) {
		named := "a host key"
		if want != nil {
			named = describeCert(want)
		}
		return KindCertificateInvalid, fmt.Sprintf("signed by %s, not by the signer the open record names (%s)", what, named)
	}
	return "", ""
}

// authority is the trusted CA whose key is key, or nil.
func (v *verifier) authority(key gossh.PublicKey) *Authority {
	for i, ca := range v.keys.Authorities {
		if bytes.Equal(ca.Key.Marshal(), key.Marshal()) {
			return &v.keys.Authorities[i]
		}
	}
	return nil
}

// describeSigner names the key that made a signature for a message: its
// fingerprint, or a certificate's serial, key id and CA.
func describeSigner(pub gossh.PublicKey) string {
	if cert, ok := pub.(*gossh.Certificate); ok {
		return describeCert(cert)
	}
	return gossh.FingerprintSHA256(pub)
}

// describeCert names a certificate: serial, key id (escaped: the
// certificate is the session's, hostile), its key and its CA.
func describeCert(cert *gossh.Certificate) string {
	return fmt.Sprintf("the certificate serial %d (key id \"%s\") of the key %s, issued by %s", cert.Serial,
		termsafe.Escape(cert.KeyId), gossh.FingerprintSHA256(cert.Key), gossh.FingerprintSHA256(cert.SignatureKey))
}

// certWindow is a certificate's validity window as ssh-keygen -L prints it.
func certWindow(cert *gossh.Certificate) string {
	at := func(t uint64) string {
		if t > uint64(1<<62) {
			return "forever"
		}
		return time.Unix(int64(t), 0).UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("valid from %s to %s", at(cert.ValidAfter), at(cert.ValidBefore))
}
