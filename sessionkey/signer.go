package sessionkey

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// The signer protocol, between the sidecar (Key) and its signer child
// (ServeSigner), over the child's stdin and stdout. Every frame is a
// 4-byte big-endian length and that many bytes, bounded both ways:
//
//	child → sidecar, once at start: the key's public key (SSH wire form),
//	    which the sidecar holds to the certificate before any use;
//	sidecar → child: data to sign, 1 to maxSignData bytes;
//	child → sidecar: a status byte (0: a signature follows, SSH wire
//	    form; 1: an error message follows, at most maxErrorText bytes).
//
// The child signs until its stdin ends, then exits. It holds one key and
// knows nothing else of the session.
const (
	maxSignData  = 4 << 10 // the recorder signs SSHSIG's signed data: magic, namespace and a SHA-512
	maxFrame     = 16 << 10
	maxErrorText = 512
	// signerWait bounds each answer of the child, and its start.
	signerWait = 5 * time.Second
	// exitWait bounds the child's exit once its stdin is closed.
	exitWait = 2 * time.Second
)

// SignerCommand is how the sidecar starts a signer child: the program (the
// sidecar's own executable) and its arguments (its hidden `session-signer`
// subcommand), and its environment (nil: none; the child needs nothing of
// the sidecar's settings). The key file is its fd 3.
type SignerCommand struct {
	Path string
	Args []string
	Env  []string
}

// Key is one session's signing key, presented with its certificate
// (gossh.NewCertSigner's way, so every signature carries it): a
// gossh.Signer whose private half lives in a signer child only.
type Key struct {
	cert    *gossh.Certificate
	serial  uint64
	file    string // the key file in active/, destroyed with the key
	dir     *Pool
	mu      sync.Mutex
	cmd     *exec.Cmd
	in      *os.File      // the child's stdin, our end
	out     *os.File      // the child's stdout, our end
	gone    bool          // destroyed
	failErr error         // a protocol failure: every later Sign fails too
	exited  chan struct{} // closed when the child has exited; waitErr then says how
	waitErr error
}

// PublicKey is the certificate.
func (k *Key) PublicKey() gossh.PublicKey { return k.cert }

// SignerPID is the signer child's process id, for the log and the tests
// that hold Destroy to ending it.
func (k *Key) SignerPID() int { return k.cmd.Process.Pid }

// Serial is the certificate's serial.
func (k *Key) Serial() uint64 { return k.serial }

// Sign asks the child to sign data and checks the signature against the
// certificate's key before returning it: a child that answers with
// anything else is a failure, never a signature.
func (k *Key) Sign(_ io.Reader, data []byte) (*gossh.Signature, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.gone:
		return nil, fmt.Errorf("sessionkey: key %d: destroyed", k.serial)
	case k.failErr != nil:
		return nil, k.failErr
	case len(data) == 0 || len(data) > maxSignData:
		return nil, fmt.Errorf("sessionkey: key %d: %d bytes to sign (1 to %d)", k.serial, len(data), maxSignData)
	}
	sig, err := k.exchange(data)
	if err != nil {
		k.failErr = fmt.Errorf("sessionkey: key %d: signer: %w", k.serial, err)
		return nil, k.failErr
	}
	if err := k.cert.Key.Verify(data, sig); err != nil {
		k.failErr = fmt.Errorf("sessionkey: key %d: the signer's signature does not verify with the certificate's key: %w", k.serial, err)
		return nil, k.failErr
	}
	return sig, nil
}

func (k *Key) exchange(data []byte) (*gossh.Signature, error) {
	deadline := time.Now().Add(signerWait)
	k.in.SetWriteDeadline(deadline)
	if err := writeFrame(k.in, data); err != nil {
		return nil, err
	}
	k.out.SetReadDeadline(deadline)
	reply, err := readFrame(k.out)
	if err != nil {
		return nil, err
	}
	if len(reply) == 0 {
		return nil, errors.New("empty answer")
	}
	if reply[0] != 0 {
		return nil, fmt.Errorf("refused: %.*q", maxErrorText, reply[1:])
	}
	sig := new(gossh.Signature)
	if err := gossh.Unmarshal(reply[1:], sig); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	return sig, nil
}

// Destroy destroys the key: the signer child ends (its stdin closed, then
// killed past exitWait), and the key file is overwritten with zeros,
// synced and removed, with its certificate. It is what sealing a session
// does; a second call does nothing.
func (k *Key) Destroy() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gone {
		return nil
	}
	k.gone = true
	err := k.stopChild()
	return errors.Join(err, k.dir.destroyFiles(k.serial, k.file))
}

// Release ends the signer child and leaves the key file in active/: the
// session it signs was not sealed (its closing records were not all
// written), and the next start's recovery signs its statement with it,
// then destroys it. A second call, or Destroy after it, only removes.
func (k *Key) Release() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gone || k.cmd == nil {
		return nil
	}
	err := k.stopChild()
	k.cmd = nil
	return err
}

func (k *Key) stopChild() error {
	if k.cmd == nil {
		return nil
	}
	k.in.Close()
	var err error
	select {
	case <-k.exited:
		err = k.waitErr
	case <-time.After(exitWait):
		k.cmd.Process.Kill()
		err = fmt.Errorf("sessionkey: key %d: the signer did not exit within %v of its input's end; killed", k.serial, exitWait)
		<-k.exited
	}
	k.out.Close()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		err = fmt.Errorf("sessionkey: key %d: signer: %w", k.serial, err)
	}
	return err
}

// startSigner starts the signer child on the open key file and holds the
// public key it reports to cert's.
func startSigner(command SignerCommand, keyFile *os.File, cert *gossh.Certificate) (*exec.Cmd, *os.File, *os.File, error) {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, nil, nil, err
	}
	cmd := exec.Command(command.Path, command.Args...)
	cmd.Env = append([]string{}, command.Env...) // never nil: nil would inherit the sidecar's
	cmd.Stdin, cmd.Stdout = stdinR, stdoutW
	cmd.ExtraFiles = []*os.File{keyFile}
	cmd.SysProcAttr = signerProcAttr()
	err = cmd.Start()
	stdinR.Close()
	stdoutW.Close()
	if err != nil {
		stdinW.Close()
		stdoutR.Close()
		return nil, nil, nil, fmt.Errorf("start the signer: %w", err)
	}
	fail := func(err error) (*exec.Cmd, *os.File, *os.File, error) {
		stdinW.Close()
		cmd.Process.Kill()
		cmd.Wait()
		stdoutR.Close()
		return nil, nil, nil, err
	}
	stdoutR.SetReadDeadline(time.Now().Add(signerWait))
	pub, err := readFrame(stdoutR)
	if err != nil {
		return fail(fmt.Errorf("the signer's start: %w", err))
	}
	if !bytes.Equal(pub, cert.Key.Marshal()) {
		return fail(errors.New("the key file's public key is not the certificate's"))
	}
	return cmd, stdinW, stdoutR, nil
}

func writeFrame(w io.Writer, p []byte) error {
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(p)), uint32(len(p)))
	_, err := w.Write(append(frame, p...))
	return err
}

// readFrame reads one frame of at most maxFrame bytes.
func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes, more than %d", size, maxFrame)
	}
	p := make([]byte, size)
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, err
	}
	return p, nil
}
