package wholewrite

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// halfFile stores half of each write, then fails, as a full disk does.
type halfFile struct{ *os.File }

func (f halfFile) Write(p []byte) (int, error) {
	n, _ := f.File.Write(p[:len(p)/2])
	return n, syscall.ENOSPC
}

// TestWriteCutsBack: a write that stores part of p leaves the file as it
// was before it, offset included, so the next write follows on directly.
func TestWriteCutsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if torn, err := Write(f, []byte("whole\n")); torn != 0 || err != nil {
		t.Fatalf("Write = %d, %v", torn, err)
	}
	if torn, err := Write(halfFile{f}, []byte("torn line\n")); torn != 0 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("failed Write = %d, %v; want 0 torn and ENOSPC", torn, err)
	}
	if _, err := f.Write([]byte("next\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, []byte("whole\nnext\n")) {
		t.Fatalf("file %q, want the torn line gone without a hole", got)
	}
}

// notAFile cannot be cut back.
type notAFile struct{ bytes.Buffer }

func (b *notAFile) Write(p []byte) (int, error) {
	b.Buffer.Write(p[:1])
	return 1, syscall.ENOSPC
}

// TestWriteCannotCut: the torn bytes that stay are reported.
func TestWriteCannotCut(t *testing.T) {
	torn, err := Write(&notAFile{}, []byte("abc"))
	if torn != 1 || !errors.Is(err, ErrNotRewindable) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write = %d, %v; want 1 torn, ENOSPC and ErrNotRewindable", torn, err)
	}
	if err := CutBack(&notAFile{}, 0); err != nil {
		t.Fatalf("CutBack of nothing = %v", err)
	}
}
