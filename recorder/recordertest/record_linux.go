package recordertest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// RunID is the run the sessions are recorded under, and NewRunDir's name.
const RunID = "run-1"

var (
	signerOnce sync.Once
	signer     gossh.Signer
)

// Signer is the sidecar host key of a test process: one fresh ed25519 key.
func Signer() gossh.Signer {
	signerOnce.Do(func() { signer = testutil.NewSigner() })
	return signer
}

// Trusted is the examiner's key list for Signer.
func Trusted() []gossh.PublicKey { return []gossh.PublicKey{Signer().PublicKey()} }

// Spec is what a recorded session saw, in order.
type Spec struct {
	ID       string
	Steps    []Chunk
	MaxBytes int64
	// DeliveredOut and DeliveredErr are the counts the close record
	// carries; -1 leaves the header out.
	DeliveredOut, DeliveredErr int64
}

// Chunk is one read from a stream: vocab.StreamIn, StreamOut or StreamErr.
type Chunk struct {
	Stream string
	P      string
}

// record hands the chunk to the recorder as the broker's copier of its
// stream would.
func (c Chunk) record(s *recorder.Session) error {
	switch c.Stream {
	case vocab.StreamIn:
		return s.Input([]byte(c.P))
	case vocab.StreamOut:
		return s.Output([]byte(c.P))
	case vocab.StreamErr:
		return s.Stderr([]byte(c.P))
	}
	return fmt.Errorf("recordertest: no stream %q", c.Stream)
}

// In is a chunk of input.
func In(p string) Chunk { return Chunk{vocab.StreamIn, p} }

// Out is a chunk of output.
func Out(p string) Chunk { return Chunk{vocab.StreamOut, p} }

// Err is a chunk of stderr.
func Err(p string) Chunk { return Chunk{vocab.StreamErr, p} }

// PTYSpec is an interactive session: output around some input.
func PTYSpec(id string) Spec {
	return Spec{ID: id, DeliveredOut: -1, DeliveredErr: -1, Steps: []Chunk{
		Out("$ "), In("ls -l\r"), Out("ls -l\r\ntotal 0\r\n"), Out("-rw-r--r-- 1 kali kali 0 notes.txt\r\n$ "),
	}}
}

// NewRunDir is a harvested run's directory, named after RunID.
func NewRunDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), RunID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Record records spec with the real recorder under a scratch root and
// moves the session into runDir/kali-side, as the lab's harvest does. It
// returns the concatenated output and stderr bytes.
func Record(t *testing.T, runDir string, spec Spec) (out, errOut []byte) {
	t.Helper()
	root := t.TempDir()
	s, err := recorder.Create(root, recorder.Meta{RunID: RunID, SessionID: spec.ID},
		recorder.Options{Signer: Signer(), MaxBytes: spec.MaxBytes})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range spec.Steps {
		if err := c.record(s); err != nil {
			t.Fatal(err)
		}
		switch c.Stream {
		case vocab.StreamOut:
			out = append(out, c.P...)
		case vocab.StreamErr:
			errOut = append(errOut, c.P...)
		}
	}
	var hs []recorder.Header
	if spec.DeliveredOut >= 0 {
		hs = append(hs, recorder.Header{Name: vocab.HeaderBytesDelivered, Value: strconv.FormatInt(spec.DeliveredOut, 10)})
	}
	if spec.DeliveredErr >= 0 {
		hs = append(hs, recorder.Header{Name: vocab.HeaderBytesDeliveredErr, Value: strconv.FormatInt(spec.DeliveredErr, 10)})
	}
	if err := s.Close(0, hs...); err != nil {
		t.Fatal(err)
	}
	kali := filepath.Join(runDir, vocab.KaliSideDir)
	if err := os.MkdirAll(kali, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.Dir(), filepath.Join(kali, spec.ID)); err != nil {
		t.Fatal(err)
	}
	return out, errOut
}
