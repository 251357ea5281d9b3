package sessionkey

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// maxKeyFile bounds the key file the signer reads: an OpenSSH ed25519
// private key is about 400 bytes.
const maxKeyFile = 16 << 10

// ServeSigner is the signer child (signer.go gives the protocol): it reads
// the private key from keyFile, closes it, reports the public key on out,
// then signs each frame read from in until in ends. It first makes the
// process undumpable (PR_SET_DUMPABLE 0): no core file, and no process of
// the same user can read its memory through ptrace or /proc/<pid>/mem,
// so the key it holds is reachable by root alone, and only while it runs.
func ServeSigner(keyFile *os.File, in io.Reader, out io.Writer) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("sessionkey: signer: PR_SET_DUMPABLE: %w", err)
	}
	signer, err := loadKey(keyFile)
	if err != nil {
		return err
	}
	if err := writeFrame(out, signer.PublicKey().Marshal()); err != nil {
		return err
	}
	for {
		data, err := readFrame(in)
		if errors.Is(err, io.EOF) {
			return nil // the session is sealed
		}
		if err != nil {
			return fmt.Errorf("sessionkey: signer: %w", err)
		}
		if len(data) == 0 || len(data) > maxSignData {
			if err := writeFrame(out, append([]byte{1}, fmt.Sprintf("%d bytes to sign (1 to %d)", len(data), maxSignData)...)); err != nil {
				return err
			}
			continue
		}
		sig, err := signer.Sign(rand.Reader, data)
		if err != nil {
			msg := err.Error()
			if len(msg) > maxErrorText {
				msg = msg[:maxErrorText]
			}
			if err := writeFrame(out, append([]byte{1}, msg...)); err != nil {
				return err
			}
			continue
		}
		if err := writeFrame(out, append([]byte{0}, gossh.Marshal(sig)...)); err != nil {
			return err
		}
	}
}

// loadKey reads and parses the key file, then closes it; the bytes read
// are cleared once parsed.
func loadKey(keyFile *os.File) (gossh.Signer, error) {
	defer keyFile.Close()
	raw, err := io.ReadAll(io.LimitReader(keyFile, maxKeyFile+1))
	defer clear(raw)
	if err != nil {
		return nil, fmt.Errorf("sessionkey: signer: read the key: %w", err)
	}
	if len(raw) > maxKeyFile {
		return nil, fmt.Errorf("sessionkey: signer: the key file is larger than %d bytes", maxKeyFile)
	}
	signer, err := gossh.ParsePrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("sessionkey: signer: the key file: %w", err)
	}
	if signer.PublicKey().Type() != gossh.KeyAlgoED25519 {
		return nil, fmt.Errorf("sessionkey: signer: a %s key; session keys are ed25519", signer.PublicKey().Type())
	}
	return signer, nil
}
