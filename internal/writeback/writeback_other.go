//go:build !linux

package writeback

import "os"

// dropCached does nothing outside Linux: there Sync is f.Sync.
func dropCached(*os.File, int64) {}
