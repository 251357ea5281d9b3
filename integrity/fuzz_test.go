package integrity

import (
	"bytes"
	"crypto/ed25519"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

// fuzzSigner is a fixed key, so that the seed signatures stay valid.
func fuzzSigner(t testing.TB) gossh.Signer {
	s, err := gossh.NewSignerFromKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzVerifySSHSIG verifies an arbitrary armored signature: the examiner
// reads checkpoint signatures from a capture folder, which may be forged.
// A signature that verifies is bound to its message and namespace (one
// byte more of either and it fails) and names its key; a refused one names
// no key. Signing (namespace, message) with the fixed key and verifying
// gives that key back.
func FuzzVerifySSHSIG(f *testing.F) {
	signer := fuzzSigner(f)
	msg := HeadMessage("run-1", "s-1", 7, "ab")
	good, err := SignSSHSIG(signer, HeadNamespace, msg)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, HeadNamespace, msg)
	f.Add(good, "file", msg)
	f.Add(good, HeadNamespace, append(bytes.Clone(msg), 0))
	f.Add(good[:len(good)/2], HeadNamespace, msg)
	f.Add("-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n", "", []byte{})
	f.Fuzz(func(t *testing.T, armored, namespace string, message []byte) {
		pub, err := VerifySSHSIG(armored, namespace, message)
		if err != nil {
			if pub != nil {
				t.Fatalf("refused (%v) but named a key", err)
			}
		} else {
			if pub == nil {
				t.Fatal("verified without naming a key")
			}
			if _, err := VerifySSHSIG(armored, namespace, append(bytes.Clone(message), 'x')); err == nil {
				t.Fatal("the signature also verifies another message")
			}
			if _, err := VerifySSHSIG(armored, namespace+"x", message); err == nil {
				t.Fatal("the signature also verifies in another namespace")
			}
		}
		sig, err := SignSSHSIG(signer, namespace, message)
		if err != nil {
			t.Fatal(err)
		}
		pub, err = VerifySSHSIG(sig, namespace, message)
		if err != nil || !bytes.Equal(pub.Marshal(), signer.PublicKey().Marshal()) {
			t.Fatalf("own signature does not verify to the signer: %v", err)
		}
	})
}
