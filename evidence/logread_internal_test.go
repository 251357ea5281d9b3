package evidence

import (
	"bufio"
	"errors"
	"testing"
)

// endless yields 'a' forever and counts what it gave.
type endless struct{ n int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	e.n += int64(len(p))
	return len(p), nil
}

// TestRecordLineReadIsBounded reads a line that never ends: the reader must
// give up at MaxRecordLine, having read no more than the bound and one
// buffer from the source.
func TestRecordLineReadIsBounded(t *testing.T) {
	src := &endless{}
	_, err := readBoundedLine(bufio.NewReaderSize(src, 64<<10), MaxRecordLine)
	if !errors.Is(err, errRecordTooLong) {
		t.Fatalf("err %v, want errRecordTooLong", err)
	}
	if src.n > MaxRecordLine+2*(64<<10) {
		t.Errorf("read %d bytes of a line bounded at %d", src.n, MaxRecordLine)
	}
}
