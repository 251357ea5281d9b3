// Package wholewrite keeps the whole-unit rule of the files the sidecar
// appends to (a log's records, a timing file's lines, a witness's
// blocks): a write that fails part-way (a full disk, a file-size limit)
// is cut back to where it began, so a file never ends in a torn unit that
// a reader takes for damage. The bytes a cut removes were never vouched
// for: the writers count a unit only once it is whole in the file.
package wholewrite

import (
	"errors"
	"fmt"
	"io"
)

// Rewinder is the part of an *os.File that cutting back takes.
type Rewinder interface {
	Seek(offset int64, whence int) (int64, error)
	Truncate(size int64) error
}

// ErrNotRewindable is CutBack's error for a writer that is not a file.
var ErrNotRewindable = errors.New("wholewrite: the torn unit cannot be cut back: not a file")

// CutBack removes the n bytes a failed write left at the end of w (an
// append-only file, not opened O_APPEND, whose offset is its end) and
// puts the offset back, so the next write continues from there without
// a hole.
func CutBack(w io.Writer, n int64) error {
	if n <= 0 {
		return nil
	}
	rw, ok := w.(Rewinder)
	if !ok {
		return ErrNotRewindable
	}
	end, err := rw.Seek(0, io.SeekCurrent)
	if err == nil {
		err = rw.Truncate(end - n)
	}
	if err == nil {
		_, err = rw.Seek(end-n, io.SeekStart)
	}
	if err != nil {
		return fmt.Errorf("wholewrite: cut back the torn unit: %w", err)
	}
	return nil
}

// Write writes p to w whole or not at all, and returns the write's error.
// After a write that stored part of p and could not be cut back, the torn
// bytes stay: torn says how many (0 otherwise).
func Write(w io.Writer, p []byte) (torn int, err error) {
	n, err := w.Write(p)
	if err == nil {
		return 0, nil
	}
	if cerr := CutBack(w, int64(n)); cerr != nil {
		return n, errors.Join(err, cerr)
	}
	return 0, err
}
