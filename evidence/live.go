package evidence

import (
	"os"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Telling a session still being recorded from one whose sidecar crashed.
//
// Both leave a log with an open record and no close record, and a
// session idle for an hour has no recent checkpoint either, so the files
// alone cannot tell them apart. The recorder therefore holds an exclusive
// flock(2) on the session's log from its creation until the log is closed
// (recorder.Create); the kernel drops it when the process dies, however it
// dies. The verifier probes it before it opens the log: a lock it cannot
// share means a recorder is writing the session now (in progress). The
// probe holds its shared lock for no longer than the probe itself.
//
// The limits: the lock exists only on the host whose kernel runs the
// recorder (the container, or the host with the capture volume mounted);
// a copy (docker cp, a harvest) carries no lock, so a copy of a session
// taken before its close verifies as unfinalized, as a crash does. A
// restarted sidecar's recovery record is the positive statement of a
// crash. On systems without flock the probe says not recording.

// recording reports whether a recorder holds the log of the session.
func (s sessionFiles) recording(name string) bool {
	f, _, err := s.open(name)
	if err != nil {
		return false
	}
	defer f.Close()
	return HeldByRecorder(f)
}

// HeldByRecorder reports whether a recorder holds the log open as f
// locked: the session is being recorded now. The startup recovery leaves
// such a session alone (another server on the same capture root records
// it).
func HeldByRecorder(f *os.File) bool { return lockedByWriter(f) }

// Recording reports whether a recorder is writing the session in dir now:
// the recorder holds its log locked (see above).
func Recording(dir string) bool { return sessionFiles{dir: dir}.recording(vocab.LogFile) }
