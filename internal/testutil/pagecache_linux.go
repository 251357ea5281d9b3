package testutil

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CachedPages reports, page by page, which of the file's pages are in the
// page cache: mincore(2) on a shared mapping of it, which does not fault
// them in. The file must not be empty.
func CachedPages(t testing.TB, path string) []bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap %s: %v", path, err)
	}
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (fi.Size()+page-1)/page)
	// x/sys/unix has no wrapper for mincore(2).
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore %s: %v", path, errno)
	}
	cached := make([]bool, len(vec))
	for i, v := range vec {
		cached[i] = v&1 != 0
	}
	return cached
}

// SkipWhereFilesLiveInMemory skips the test when dir is on tmpfs or
// ramfs: there a file's pages are its storage, and advice to drop them
// is ignored.
func SkipWhereFilesLiveInMemory(t testing.TB, dir string) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	if st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC {
		t.Skipf("%s is on tmpfs or ramfs, where a file's pages are its storage and are never dropped", dir)
	}
}
