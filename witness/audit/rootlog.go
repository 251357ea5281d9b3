package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// rootLog is a file of the capture root (_audit/audit.log,
// _proc-acct/proc-acct.log), rotated as auditd rotates its log: past
// RotateBytes, name.N-1 becomes name.N, ..., name becomes name.1, and a
// new name starts; past Files the oldest is removed. These files are the
// lab's harvest of all sessions; the signed evidence is each session's own
// audit folder.
type rootLog struct {
	path   string
	limits Limits
	f      *os.File
	size   int64
}

// openRootLog makes dir (0700) under root and opens name in it for append.
func openRootLog(root, dir, name string, limits Limits) (*rootLog, error) {
	d := filepath.Join(root, dir)
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("audit: %s is not a directory", d)
	}
	l := &rootLog{path: filepath.Join(d, name), limits: limits}
	return l, l.open()
}

func (l *rootLog) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|noFollow, 0o600)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit: %w", err)
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// write appends b, rotating first when it would not fit.
func (l *rootLog) write(b []byte) error {
	if l.f == nil {
		if err := l.open(); err != nil {
			return err
		}
	}
	if l.size > 0 && l.size+int64(len(b)) > l.limits.RotateBytes {
		if err := l.rotate(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	if err != nil {
		return fmt.Errorf("audit: write %s: %w", l.path, err)
	}
	return nil
}

func (l *rootLog) rotate() error {
	l.f.Close()
	l.f = nil
	// Each rename replaces the name it moves to, so the oldest goes as
	// name.Files-2 takes its place.
	for n := l.limits.Files - 2; n >= 1; n-- {
		os.Rename(fmt.Sprintf("%s.%d", l.path, n), fmt.Sprintf("%s.%d", l.path, n+1))
	}
	if l.limits.Files > 1 {
		if err := os.Rename(l.path, l.path+".1"); err != nil {
			return fmt.Errorf("audit: rotate %s: %w", l.path, err)
		}
	} else {
		os.Remove(l.path)
	}
	return l.open()
}

func (l *rootLog) sync() error {
	if l.f == nil {
		return nil
	}
	return l.f.Sync()
}

func (l *rootLog) close() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
