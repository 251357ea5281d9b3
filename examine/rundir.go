// Package examine holds the examiner's tools above the session verifier
// (package evidence): verifying a run folder and reconciling a harvest with
// the tool server's tee (VerifyRun, reconcile.go, tee.go, rundir.go),
// telling a path that is no session folder from a damaged one
// (VerifySession, notasession.go),
// asciicast export, session listing (list.go, `ls`), replay and live follow
// (play.go), and the JSON encoder of every report it prints. Like
// evidence, it treats every file of a capture folder as hostile, writes
// nothing into one, and builds on every OS an examiner's laptop runs.
package examine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// readRunDir lists the folder rel (slash-separated, e.g. "mcp-side/sessions";
// "" for runDir itself) of a run. runDir is the examiner's choice and is followed;
// every component of rel must be a real directory: a symbolic link there
// is refused and named, as links in a session folder are (safefs.OpenRegular),
// never followed. The folder is listed through the handle that was
// checked (os.SameFile), in name order, so a component swapped for a link between the
// check and the open is refused too.
func readRunDir(runDir, rel string) ([]os.DirEntry, error) {
	path := runDir
	st, err := os.Stat(runDir)
	if err != nil {
		return nil, err
	}
	for _, part := range strings.Split(rel, "/") {
		if part == "" {
			continue
		}
		path = filepath.Join(path, part)
		var err error
		if st, err = os.Lstat(path); err != nil {
			return nil, err
		}
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			return nil, fmt.Errorf("%s is a symbolic link, which is not followed in a run folder", path)
		case st.Mode().IsRegular():
			return nil, fmt.Errorf("%s is a regular file, not a folder", path)
		case !st.IsDir():
			return nil, fmt.Errorf("%s is %s, not a folder", path, safefs.DescribeMode(st.Mode()))
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !os.SameFile(st, opened) {
		return nil, fmt.Errorf("%s changed while it was opened (swapped for a link?); it is not read", path)
	}
	entries, err := f.ReadDir(-1)
	// In name order, as os.ReadDir lists: reports list sessions so.
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// RunSessions lists the session folders of a run folder, as VerifyRun
// finds them (a harvest's kali-side/, or the run folder itself), in name
// order; an entry that is no session folder (not a real folder, or no
// pty/ in it; the sidecar's own folder) is named in skipped with why.
func RunSessions(runDir string) (dirs, skipped []string, err error) {
	rel := ""
	if runLayout(runDir) == LayoutHarvest {
		rel = vocab.KaliSideDir
	}
	entries, err := readRunDir(runDir, rel)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		dir := filepath.Join(runDir, rel, e.Name())
		switch {
		case e.Name() == vocab.SidecarDir && rel == "":
		case !e.IsDir():
			skipped = append(skipped, dir+": not a session folder (symbolic links are not followed)")
		default:
			if _, err := os.Lstat(filepath.Join(dir, vocab.PTYDir)); err != nil {
				skipped = append(skipped, fmt.Sprintf("%s: not a session folder (no %s folder)", dir, vocab.PTYDir))
				continue
			}
			dirs = append(dirs, dir)
		}
	}
	return dirs, skipped, nil
}
