package examine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// VerifySession verifies the session folder dir (evidence.Verify), unless
// dir is no session folder at all: then its report has status
// not-a-session and says what dir is and what to give instead (a missing
// path, a run folder, a harvest, a capture root). Reading a run folder
// as one session would report every file of a session missing, and call
// a folder that holds no evidence tampered.
func VerifySession(dir string, keys evidence.Keys, opts evidence.Options) *evidence.Report {
	if why := NotASessionReason(dir, true); why != "" {
		return evidence.NotASession(dir, why)
	}
	return evidence.Verify(dir, keys, opts)
}

// maxSessionHints is how many session folders a capture root's hint names.
const maxSessionHints = 5

// maxRunsProbed bounds the run folders of a capture root looked into for
// the hint: a root of many runs costs a bounded amount of reading.
const maxRunsProbed = 64

// NotASessionReason says why dir is no session folder, and what to give
// instead, or "" for a session's folder however damaged. runDir says
// whether the command takes --run-dir (verify, export --format html), so
// a run folder's or a harvest's hint points there; play's names one of
// the run's sessions instead.
func NotASessionReason(dir string, runDir bool) string {
	instead := "name one of its sessions"
	if runDir {
		instead = "use --run-dir " + dir
	}
	return notASession(dir, instead)
}

// notASession says what dir is when it is no session folder, and what to
// give instead (runInstead for a run folder or a harvest); "" when it is one, damaged or not, which the verifier
// then reports. A folder holding pty/, or a witness folder (pcap/,
// audit/), is a session's: one whose pty/ was removed is evidence
// destroyed, reported as such, never a hint.
func notASession(dir, runInstead string) string {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such folder: check the path"
	case errors.Is(err, syscall.ENOTDIR):
		// A path through a file (a/file/sub): no folder is there at all.
		return "no such folder: a part of the path is a file, not a folder"
	case err != nil:
		return "" // unreadable: the verifier says so, as of any session folder
	case !st.IsDir():
		return fmt.Sprintf("not a folder: a session folder holds %s", logPath())
	}
	for _, name := range []string{vocab.PTYDir, vocab.PcapDir, vocab.AuditDir} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			return ""
		}
	}
	if runLayout(dir) == LayoutHarvest {
		return fmt.Sprintf("a run's harvest (%s/ and mcp-side/), not a session folder: %s", vocab.KaliSideDir, runInstead)
	}
	if sessions := sessionsIn(dir, 1); len(sessions) > 0 {
		return fmt.Sprintf("a run folder (its subfolders are sessions, such as %s): %s", sessions[0], runInstead)
	}
	if sessions := sessionsBelow(dir); len(sessions) > 0 {
		return fmt.Sprintf("a capture root: its sessions are RUN/SESSION folders below it, such as %s (aptl-kali-capture ls %s lists them all)",
			strings.Join(sessions, ", "), dir)
	}
	return fmt.Sprintf("not a session folder: it has no %s/ folder (a session folder holds %s)", vocab.PTYDir, logPath())
}

// notARun says what runDir is when --run-dir is given no run folder: a
// missing path, or a session folder; "" otherwise (a capture root's runs
// are each reported as no session, with what --run-dir takes).
func notARun(runDir string) string {
	if _, err := os.Stat(runDir); errors.Is(err, fs.ErrNotExist) {
		return "no such folder: check the path"
	}
	if _, err := os.Lstat(filepath.Join(runDir, vocab.PTYDir)); err == nil {
		return "a session folder, not a run folder: give it without --run-dir"
	}
	return ""
}

// logPath is where a session folder holds its integrity log.
func logPath() string { return vocab.PTYDir + "/" + vocab.LogFile }

// isSession reports whether dir holds an integrity log where a session
// folder holds it (links are not followed).
func isSession(dir string) bool {
	st, err := os.Lstat(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
	return err == nil && st.Mode().IsRegular()
}

// sessionsIn returns up to limit session folders among dir's subfolders,
// in name order.
func sessionsIn(dir string, limit int) []string {
	entries, err := listFolder(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, name := range entries.names {
		if p := filepath.Join(dir, name); isSession(p) {
			if out = append(out, p); len(out) == limit {
				break
			}
		}
	}
	return out
}

// sessionsBelow returns up to maxSessionHints session folders two levels
// below root (<root>/<run>/<session>), the first runs' first, looking
// into at most maxRunsProbed runs.
func sessionsBelow(root string) []string {
	entries, err := listFolder(root)
	if err != nil {
		return nil
	}
	runs := slices.DeleteFunc(entries.names, func(name string) bool { return name == vocab.SidecarDir })
	var out []string
	for i, run := range runs {
		if i == maxRunsProbed || len(out) == maxSessionHints {
			break
		}
		if checkRealDir(filepath.Join(root, run)) != nil {
			continue
		}
		out = append(out, sessionsIn(filepath.Join(root, run), maxSessionHints-len(out))...)
	}
	return out
}
