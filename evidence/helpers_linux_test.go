//go:build linux

// The sessions these tests verify are made by the recorder, which runs on
// Linux only; the verifier itself builds everywhere (.ci/run cross-builds it).

package evidence_test

import (
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

// The package's external tests record real sessions with package
// recorder, which imports integrity and this package; the helpers are
// those of package examine's reconciliation tests, whose sessions the
// verifier tests here reuse (a harvested run, kali-side/<session_id>).

var (
	testSignerOnce sync.Once
	testSigner     gossh.Signer
)

// signer is the sidecar host key of these tests: a fresh ed25519 key.
func signer(t *testing.T) gossh.Signer {
	t.Helper()
	testSignerOnce.Do(func() {
		testSigner = testutil.NewSigner()
	})
	return testSigner
}

// sessionSpec is what a recorded session saw, in order.
type sessionSpec struct {
	id       string
	steps    []chunk
	maxBytes int64
	// deliveredOut and deliveredErr are the counts the close record
	// carries; -1 leaves the header out.
	deliveredOut, deliveredErr int64
}

type chunk struct {
	stream string // vocab.StreamIn, vocab.StreamOut or vocab.StreamErr
	p      string
}

// recordSession records spec with the real recorder under a scratch root
// and moves the session into runDir/kali-side, as the lab's harvest does.
// It returns the concatenated output and stderr bytes.
// newRunDir is a harvested run's directory, named after the run id the
// sessions are recorded under.
func newRunDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run-1")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func recordSession(t *testing.T, runDir string, spec sessionSpec) (out, errOut []byte) {
	t.Helper()
	root := t.TempDir()
	s, err := recorder.Create(root, recorder.Meta{RunID: "run-1", SessionID: spec.id},
		recorder.Options{Signer: signer(t), MaxBytes: spec.maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range spec.steps {
		switch c.stream {
		case vocab.StreamIn:
			err = s.Input([]byte(c.p))
		case vocab.StreamOut:
			err, out = s.Output([]byte(c.p)), append(out, c.p...)
		case vocab.StreamErr:
			err, errOut = s.Stderr([]byte(c.p)), append(errOut, c.p...)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var hs []recorder.Header
	if spec.deliveredOut >= 0 {
		hs = append(hs, recorder.Header{Name: "APTL_BYTES_DELIVERED", Value: strconv.FormatInt(spec.deliveredOut, 10)})
	}
	if spec.deliveredErr >= 0 {
		hs = append(hs, recorder.Header{Name: "APTL_BYTES_DELIVERED_STDERR", Value: strconv.FormatInt(spec.deliveredErr, 10)})
	}
	if err := s.Close(0, hs...); err != nil {
		t.Fatal(err)
	}
	kali := filepath.Join(runDir, "kali-side")
	if err := os.MkdirAll(kali, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.Dir(), filepath.Join(kali, spec.id)); err != nil {
		t.Fatal(err)
	}
	return out, errOut
}

func trusted(t *testing.T) []gossh.PublicKey { return []gossh.PublicKey{signer(t).PublicKey()} }

// ptySpec is an interactive session: output around some input.
func ptySpec(id string) sessionSpec {
	return sessionSpec{id: id, deliveredOut: -1, deliveredErr: -1, steps: []chunk{
		{vocab.StreamOut, "$ "},
		{vocab.StreamIn, "ls -l\r"},
		{vocab.StreamOut, "ls -l\r\ntotal 0\r\n"},
		{vocab.StreamOut, "-rw-r--r-- 1 kali kali 0 notes.txt\r\n$ "},
	}}
}
