package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// LockKernelAudit serializes the tests that load rules into the kernel's
// audit, across the test binaries `go test ./...` runs at once (the audit
// witness's live suite, serve's audit tests, the Compose pair's): the
// kernel's rule list is one for the host, and one suite's rules, removals
// and counts would be another's surprise. The lock is an flock(2) on a
// file in the temporary folder, held until the test ends.
func LockKernelAudit(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "aptl-kernel-audit-tests.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("kernel audit test lock: %v", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("kernel audit test lock: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // the close releases the lock
}
