package evidence

import (
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestTSPassReadShortFile: the pass reads exactly the bytes asked for and
// reports each as progress; a file that ends before them (it shrank after
// its size was read) is io.ErrUnexpectedEOF, never a short read passed off
// as whole.
func TestTSPassReadShortFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typescript")
	if err := os.WriteFile(path, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var progress int64
	v := &verifier{opts: Options{Progress: func(n int64) { progress += n }}}
	p := newTSPass(v, f, 10)
	h := sha256.New()
	if err := p.read(2, 5, h); err != nil || progress != 5 {
		t.Fatalf("read of bytes 2..7: %v, progress %d", err, progress)
	}
	if want := sha256.Sum256([]byte("23456")); string(h.Sum(nil)) != string(want[:]) {
		t.Error("the digest is not of bytes 2..7")
	}
	if err := p.read(8, 5, sha256.New()); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read past the end: %v, want io.ErrUnexpectedEOF", err)
	}
}
