package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// SmallVolume mounts a tmpfs of size (mount(8)'s size=, "256k") in a new
// folder of t.TempDir and returns it: a volume the test can fill. It
// skips the test, saying why, where mounting is not allowed (not root, no
// mount(8)); the mount is lazily unmounted at cleanup.
func SmallVolume(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs to fill")
	}
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// Fill writes zeros to a file in dir until the volume is full and
// returns the file's path: removing it frees the volume again.
func Fill(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	for {
		if _, err := f.Write(buf[:1]); err != nil {
			return path
		}
	}
}

// SmallExt4 mounts a new ext4 file system of sizeMiB MiB (a loop image
// in t.TempDir) and returns its mount point: a volume with ext4's block
// allocation, journal and reserved blocks to fill. It skips the test,
// saying why, where that is not allowed (not root, no mkfs.ext4 or loop
// device).
func SmallExt4(t testing.TB, sizeMiB int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount an ext4 loop image to fill")
	}
	img := filepath.Join(t.TempDir(), "volume.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, int64(sizeMiB)<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Skipf("cannot make an ext4 image: %v %s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "ext4")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount an ext4 loop image: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}
