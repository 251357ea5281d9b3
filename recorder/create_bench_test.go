package recorder

import (
	"strconv"
	"testing"
)

// BenchmarkCreateClose opens and closes one session's record, the cost a
// session's start and end add to it (the reserve's allocation and release
// among them), on the test's temporary folder.
func BenchmarkCreateClose(b *testing.B) {
	root := b.TempDir()
	opts := testOptions()
	for i := 0; b.Loop(); i++ {
		s, err := Create(root, Meta{RunID: "r", SessionID: "s" + strconv.Itoa(i)}, opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserve is the reserve's own part: allocate and free it.
func BenchmarkReserve(b *testing.B) {
	root := b.TempDir()
	for b.Loop() {
		f, err := openReserve(root)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
