//go:build !linux

package safefs

import (
	"os"
	"path/filepath"
	"strings"
)

// openRegular is the portable fallback of safeopen_linux.go: each
// component is checked with Lstat, the file is opened, and the opened
// file must be the one checked (os.SameFile), so a component swapped for
// a link in between is refused. Unlike Linux, a named pipe swapped in
// after the check could block the open.
func openRegular(dir string, parts []string) (*os.File, int64, error) {
	for i := range parts {
		path := filepath.Join(dir, strings.Join(parts[:i+1], "/"))
		st, err := os.Lstat(path)
		if err != nil {
			return nil, 0, err
		}
		last := i == len(parts)-1
		if ok := (last && st.Mode().IsRegular()) || (!last && st.IsDir()); !ok {
			return nil, 0, &NotRegularError{Path: path, Kind: DescribeMode(st.Mode())}
		}
		if !last {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, 0, err
		}
		opened, err := f.Stat()
		if err != nil || !os.SameFile(st, opened) || !opened.Mode().IsRegular() {
			f.Close()
			return nil, 0, &NotRegularError{Path: path, Kind: "a file that changed while it was opened"}
		}
		return f, opened.Size(), nil
	}
	return nil, 0, &os.PathError{Op: "open", Path: dir, Err: os.ErrInvalid}
}

// openRegularIn falls back to dir's path: without openat the folder is
// looked up again, and a swap of it is not caught here.
func openRegularIn(dir *os.File, name string) (*os.File, int64, error) {
	return openRegular(dir.Name(), []string{name})
}
