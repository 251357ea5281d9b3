package integrity

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

func newSigner(t testing.TB) gossh.Signer {
	t.Helper()
	return testutil.NewSigner()
}

func TestSSHSIGRoundTrip(t *testing.T) {
	signer := newSigner(t)
	msg := HeadMessage("run-1", "s-1", 7, strings.Repeat("ab", 32))
	sig, err := SignSSHSIG(signer, HeadNamespace, msg)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := VerifySSHSIG(sig, HeadNamespace, msg)
	if err != nil {
		t.Fatal(err)
	}
	if string(pub.Marshal()) != string(signer.PublicKey().Marshal()) {
		t.Error("verified key is not the signer's")
	}
	if _, err := VerifySSHSIG(sig, HeadNamespace, append(msg, 'x')); err == nil {
		t.Error("modified message verified")
	}
	if _, err := VerifySSHSIG(sig, "file", msg); err == nil {
		t.Error("signature verified in another namespace")
	}
}

// TestSSHSIGWithOpenSSH checks both directions against stock ssh-keygen:
// it accepts our signature and rejects it for a modified message, and we
// accept its signature.
func TestSSHSIGWithOpenSSH(t *testing.T) {
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Skip("ssh-keygen (Debian openssh-client) not installed")
	}
	dir := t.TempDir()
	signer := newSigner(t)
	msg := HeadMessage("run-1", "s-1", 3, strings.Repeat("cd", 32))
	sig, err := SignSSHSIG(signer, HeadNamespace, msg)
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(dir, "allowed_signers")
	line := "aptl-kali-capture " + string(gossh.MarshalAuthorizedKey(signer.PublicKey()))
	mustWrite(t, allowed, line)
	mustWrite(t, filepath.Join(dir, "head.sig"), sig)
	verify := func(message []byte) error {
		cmd := exec.Command(keygen, "-Y", "verify", "-f", allowed, "-I", "aptl-kali-capture", "-n", HeadNamespace, "-s", filepath.Join(dir, "head.sig"))
		cmd.Stdin = strings.NewReader(string(message))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return &exec.ExitError{ProcessState: cmd.ProcessState, Stderr: out}
		}
		return nil
	}
	if err := verify(msg); err != nil {
		t.Fatalf("ssh-keygen rejected our signature: %v %s", err, err.(*exec.ExitError).Stderr)
	}
	if err := verify(append([]byte("x"), msg...)); err == nil {
		t.Error("ssh-keygen accepted a modified head")
	}

	// And the other way: ssh-keygen signs, we verify.
	keyFile := filepath.Join(dir, "id")
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-f", keyFile).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	mustWrite(t, filepath.Join(dir, "msg"), string(msg))
	if out, err := exec.Command(keygen, "-Y", "sign", "-f", keyFile, "-n", HeadNamespace, filepath.Join(dir, "msg")).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -Y sign: %v %s", err, out)
	}
	theirs, err := os.ReadFile(filepath.Join(dir, "msg.sig"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifySSHSIG(string(theirs), HeadNamespace, msg); err != nil {
		t.Errorf("ssh-keygen's signature did not verify: %v", err)
	}
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
