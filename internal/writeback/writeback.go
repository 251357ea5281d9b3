// Package writeback makes an evidence file durable and then gives its
// pages back: the sidecar writes each byte of a record once and does not
// read it back on any path that needs it fast (the examiner's tools,
// `play --follow` and a restart's recovery read from the file, which may
// then mean from disk), so keeping the written pages cached only grows the
// page cache by every byte recorded. On the virtual machine of
// docs/BENCHMARKS.md ("The record's pages") that growth was what bulk
// recording paid most for: each page of new file data came from memory
// not touched before, and copying into such a page cost several times what
// copying into one used before does. Pages given back after their fsync
// are reused for the next bytes. In a container the page cache counts
// against the container's memory limit, which recording alone then does
// not reach.
package writeback

import "os"

// Sync fsyncs f, a file the sidecar only appends to, and then asks the
// kernel to drop from the page cache what f held before the fsync (clean
// once it returned, and never written again), in whole steps of Step
// bytes (on Linux; its comment says why). Dropping is advice: where the
// kernel does not take it, or outside Linux, Sync is f.Sync.
func Sync(f *os.File) error {
	// The size is read before the fsync, so every byte below it was
	// written before the fsync began and is on disk when it returns.
	// Without a size (Stat failing) nothing is dropped.
	fi, statErr := f.Stat()
	if err := f.Sync(); err != nil {
		return err
	}
	if statErr == nil {
		dropCached(f, fi.Size())
	}
	return nil
}
