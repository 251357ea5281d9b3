package main

import (
	"errors"
	"fmt"

	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
)

// sessionOperand is how the examiner's synopses name a session operand:
// a session folder's path, or an id resolved under --root.
const sessionOperand = "SESSION"

// sessionOperandHelp is the -h text that says what a SESSION operand is.
const sessionOperandHelp = "SESSION is a session folder (the one that holds pty/), or an id under --root: RUN/SESSION,\n" +
	"or SESSION alone when one run holds it. A path that exists wins over an id."

// rootFlag defines --root, where a session id is looked for: serve's own
// setting of the capture root (the same environment variable and default),
// so an examiner on the sidecar's host finds what serve wrote. An empty
// value is the default, as ls takes an empty $APTL_CAPTURE_ROOT.
func rootFlag(e *cliconfig.Flags) func() string {
	var root string
	e.String(&root, "root", "APTL_CAPTURE_ROOT", defaultRoot, "capture root where a RUN/SESSION or SESSION id is looked for")
	return func() string {
		if root == "" {
			return defaultRoot
		}
		return root
	}
}

// resolveSessions turns each operand into its session folder
// (examine.ResolveSession); an id that names nothing says where the
// sessions can be listed, and a folder that is none says what it is
// (runDir: the command takes --run-dir for a run).
func resolveSessions(root string, args []string, runDir bool) ([]string, error) {
	dirs := make([]string, 0, len(args))
	for _, arg := range args {
		dir, err := examine.ResolveSession(root, arg)
		if err != nil {
			return nil, sessionError(err, root)
		}
		if why := examine.NotASessionReason(dir, runDir); why != "" {
			return nil, fmt.Errorf("%s: %s", dir, why)
		}
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

// sessionError is the resolver's error as the examiner reads it: an id
// that names nothing says where the sessions can be listed.
func sessionError(err error, root string) error {
	if errors.Is(err, examine.ErrNoSession) {
		return fmt.Errorf("%w; `%s ls %s` lists the sessions there (--root chooses another root)", err, progName, root)
	}
	return err
}
