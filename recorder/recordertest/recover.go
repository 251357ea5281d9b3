package recordertest

import (
	"context"
	"errors"
	"path/filepath"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/recorder"
)

// Recover recovers the session in dir as a sidecar start does: through
// recorder.RecoverSessions, over that one folder, signed by signer. A
// session that needed no recovery (it is finalized, already recovered, or
// its log is held) is an error, so a test cannot pass on a recovery that
// never ran.
func Recover(dir string, signer gossh.Signer) error {
	s := recorder.SessionFolder{Root: filepath.Dir(filepath.Dir(dir)), Run: filepath.Base(filepath.Dir(dir)), Session: filepath.Base(dir)}
	var outcome *recorder.RecoveryOutcome
	recorder.RecoverSessions(context.Background(), []recorder.SessionFolder{s}, recorder.Options{Signer: signer}, func(o recorder.RecoveryOutcome) { outcome = &o })
	if outcome == nil {
		return errors.New("recordertest: " + dir + " needed no recovery")
	}
	return outcome.Err
}
