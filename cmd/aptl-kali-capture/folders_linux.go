package main

// serve writes three folders: the state directory (host key, default
// readiness file), the capture root, and the readiness file's folder. The
// compose sidecar runs as uid 0 with only its witnesses' capabilities (no
// CAP_DAC_OVERRIDE), so it writes only what uid 0 owns or its mode grants;
// volumes made for the earlier uid-10001 sidecar (owned by 10001, 0700)
// refuse it. Without this check the first sign is a bare "permission
// denied" on the host key; with it, serve stops at start naming the folder,
// its owner and the fix (compose/README.md, "Volumes from a uid-10001 sidecar").

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/aptl/aptl-kali-capture/internal/capability"
	"golang.org/x/sys/unix"
)

// checkServeFolders fails on the first folder serve must write but cannot.
// A folder that does not exist yet is serve's to create (and its error, if
// it cannot, names it).
func checkServeFolders(cfg *serveConfig) error {
	folders := []struct{ what, dir string }{
		{"state directory", cfg.stateDir},
		{"capture root", cfg.root},
		{"readiness file's folder", filepath.Dir(resolveReadyFile(cfg.readyFile, cfg.stateDir))},
	}
	for _, f := range folders {
		if err := checkWritableFolder(f.what, f.dir); err != nil {
			return err
		}
	}
	return nil
}

// checkWritableFolder writes and removes an empty file in dir: the kernel's
// own answer, capabilities and filesystem flags included (access(2)
// emulations guess wrong for a root without CAP_DAC_OVERRIDE).
func checkWritableFolder(what, dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	f, err := os.CreateTemp(dir, ".aptl-write-check-*")
	if err == nil {
		name := f.Name()
		f.Close()
		return os.Remove(name)
	}
	if !errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%s %s: cannot write a file there: %w", what, dir, err)
	}
	return fmt.Errorf("%s %s: cannot write a file there: %s", what, dir, permissionHint(dir))
}

// permissionHint says who owns dir and who this server is, and the fix.
func permissionHint(dir string) string {
	uid, gid := os.Geteuid(), os.Getegid()
	self := fmt.Sprintf("this server runs as uid %d gid %d", uid, gid)
	if uid == 0 && !capability.Effective(unix.CAP_DAC_OVERRIDE) {
		self += " without CAP_DAC_OVERRIDE, so only the folder's owner and mode grant it access"
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return self
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return self
	}
	return fmt.Sprintf("owned by uid %d gid %d, mode %04o; %s. If an earlier server ran as uid %d (the compose sidecar ran as 10001 before it "+
		"ran as root for its pcap witness), give the folder and everything in it to uid %d once: chown -R %d:%d on it "+
		"(compose/README.md, \"Volumes from a uid-10001 sidecar\")",
		st.Uid, st.Gid, fi.Mode().Perm(), self, st.Uid, uid, uid, gid)
}
