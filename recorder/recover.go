package recorder

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// maxRecoveryScan bounds the sessions the startup scan looks at.
const maxRecoveryScan = 100000

// SessionFolder names one existing session folder, <Root>/<Run>/<Session>.
type SessionFolder struct {
	Root, Run, Session string
}

// Dir is the folder's path.
func (s SessionFolder) Dir() string { return filepath.Join(s.Root, s.Run, s.Session) }

// ListSessions lists the session folders under root whose run and session
// names are valid ids, reading directories only (no record file), so it
// is quick. The server lists before it listens and recovers the list
// afterwards (RecoverSessions): a session started meanwhile makes a new
// folder (ids are single-use, makeSessionDirs refuses an existing one),
// which is never on the list, so a live session is never "recovered".
func ListSessions(root string) ([]SessionFolder, error) { return listSessions(root, maxRecoveryScan) }

// listSessions is ListSessions with the bound on the sessions it lists:
// past limit it stops, saying so.
func listSessions(root string, limit int) ([]SessionFolder, error) {
	runs, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var found []SessionFolder
	var errs []error
	for _, run := range runs {
		if !run.IsDir() || !ValidID(run.Name()) || ReservedRunID(run.Name()) {
			continue
		}
		sessions, err := os.ReadDir(filepath.Join(root, run.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, sess := range sessions {
			if !sess.IsDir() || !ValidID(sess.Name()) {
				continue
			}
			if len(found) == limit {
				return found, errors.Join(append(errs, fmt.Errorf("recorder: recovery scan stopped at its bound of %d sessions", limit))...)
			}
			found = append(found, SessionFolder{Root: root, Run: run.Name(), Session: sess.Name()})
		}
	}
	return found, errors.Join(errs...)
}

// RecoveryOutcome is what became of one listed session that needed
// recovery: Err is nil when its recovery record was written. ManifestErr
// says why a recovered session has no manifest (manifest.go): the
// recovery stands without it. KeyErr says why the host key signed the
// statement of a session that had a key of its own; KeyDestroyErr why
// that key could not be destroyed once it had.
type RecoveryOutcome struct {
	Dir           string
	Err           error
	ManifestErr   error
	KeyErr        error
	KeyDestroyErr error
}

// RecoverSessions gives each listed session the sidecar never finalized
// (it crashed or was killed mid-session) a signed recovery record
// (Recover), so that the cut is stated rather than silent, and calls
// report for each one that needed it. It stops between sessions when ctx
// ends. A session that cannot be recovered is left as found.
func RecoverSessions(ctx context.Context, sessions []SessionFolder, opts Options, report func(RecoveryOutcome)) {
	for _, s := range sessions {
		if ctx.Err() != nil {
			return
		}
		outcome, need := recoverSession(s, opts)
		if need || outcome.Err != nil {
			report(outcome)
		}
	}
}

// recoverSession opens s's folders once and recovers it if it needs it;
// the recovery, which sealed the session, is followed by its manifest,
// listing the files as the restarted sidecar found them, the recovery
// file among them.
func recoverSession(s SessionFolder, opts Options) (outcome RecoveryOutcome, needed bool) {
	outcome.Dir = s.Dir()
	d, err := openSessionDirs(s.Root, s.Run, s.Session)
	if errors.Is(err, os.ErrNotExist) {
		return outcome, false // no pty folder: no record to recover
	}
	if err != nil {
		outcome.Err = err
		return outcome, false
	}
	defer d.close()
	if needed, outcome.Err = needsRecovery(d); outcome.Err != nil || !needed {
		return outcome, needed
	}
	seal, err := recoverIn(d, opts, time.Now)
	if err != nil {
		outcome.Err = err
		return outcome, true
	}
	outcome.KeyErr = seal.keyErr
	if attrs := seal.attrs; attrs[vocab.AttrManifest] == "" {
		outcome.ManifestErr = fmt.Errorf("recorder: no manifest for %s: the restart did not read the %s", d.path, attrs[vocab.AttrNotRead])
	} else {
		outcome.ManifestErr = writeManifest(d, seal.signer, recoveredDigests(attrs))
		if outcome.ManifestErr == nil {
			outcome.ManifestErr = d.session.Sync() // the manifest's names, durable
		}
	}
	// Sealed: the session's own key signs nothing more, and goes.
	outcome.KeyDestroyErr = seal.destroy()
	return outcome, true
}

// needsRecovery reports whether d's log does not end with a close record
// and its checkpoint, there is no recovery file yet, and no recorder holds
// the log (evidence.HeldByRecorder). It reads only the
// log's tail, so a start does not re-read every transcript. The log is
// opened as every record file read back is (safefs.OpenRegularIn): a log
// that is a link or a named pipe is an error naming it, never a hang.
func needsRecovery(d *sessionDirs) (bool, error) {
	var st unix.Stat_t
	if unix.Fstatat(int(d.pty.Fd()), vocab.RecoveryFile, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		return false, nil
	}
	f, size, err := safefs.OpenRegularIn(d.pty, vocab.LogFile)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if evidence.HeldByRecorder(f) {
		return false, nil // being recorded now, by another server on this root
	}
	const tail = 64 << 10
	buf := make([]byte, min(size, tail))
	// A whole read: io.EOF here means the log shrank since its size was
	// read, while no recorder held it; that is an error to name, not a
	// tail to judge.
	if _, err := f.ReadAt(buf, size-int64(len(buf))); err != nil {
		return false, fmt.Errorf("read log tail: %w", err)
	}
	lines := bytes.Split(bytes.TrimSuffix(buf, []byte("\n")), []byte("\n"))
	if !bytes.HasSuffix(buf, []byte("\n")) || len(lines) < 2 {
		return true, nil
	}
	var closing, last integrity.Record
	if json.Unmarshal(lines[len(lines)-2], &closing) != nil || json.Unmarshal(lines[len(lines)-1], &last) != nil {
		return true, nil
	}
	return !(closing.Type == vocab.TypeClose && last.Type == vocab.TypeCheckpoint), nil
}
