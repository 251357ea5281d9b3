package recorder

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// copyCrashState copies the named files of dir's pty folder into a new
// session folder under a new root (same run and session names): what a
// crash at this moment leaves on disk, since an unnamed file dies with
// the process.
func copyCrashState(t *testing.T, dir string) (root, copied string) {
	t.Helper()
	root = t.TempDir()
	copied = filepath.Join(root, filepath.Base(filepath.Dir(dir)), filepath.Base(dir))
	if err := os.MkdirAll(filepath.Join(copied, ptyDirName), dirMode); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, ptyDirName))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, ptyDirName, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(copied, ptyDirName, e.Name()), b, fileMode); err != nil {
			t.Fatal(err)
		}
	}
	return root, copied
}

// TestRecoveryKilledBeforeItsFileIsNamed: the sidecar killed while it
// writes a recovery statement (found by the crash campaign in tests/,
// reasoning on its kill points: the statement was written as two records
// into a file created under its name first). The name of the recovery file
// is itself the statement "recovered" (a start that finds it leaves the
// session alone), so a torn one stayed torn and verify called the session
// tampered, forever. Now the file gets its name only when both records
// are in it and durable: at the last moment before that, the session as a
// crash would leave it has no recovery file, needs recovery, and the next
// start's recovery makes it verify unfinalized with the statement; the
// bytes it found are untouched.
func TestRecoveryKilledBeforeItsFileIsNamed(t *testing.T) {
	root := t.TempDir()
	dir := crashedSession(t, root)
	var crashRoot, crashDir string
	wholeWritten = func(d, name string) {
		if d != dir || name != vocab.RecoveryFile {
			return
		}
		if _, err := os.Lstat(filepath.Join(dir, ptyDirName, vocab.RecoveryFile)); !os.IsNotExist(err) {
			t.Errorf("the recovery file has a name before its statement is whole and durable (lstat: %v)", err)
		}
		crashRoot, crashDir = copyCrashState(t, dir)
	}
	t.Cleanup(func() { wholeWritten = nil })
	if recovered, err := recoverUnfinalized(root, testOptions()); err != nil || len(recovered) != 1 {
		t.Fatalf("recovered %v, err %v", recovered, err)
	}
	wholeWritten = nil
	if crashDir == "" {
		t.Fatal("the recovery statement was not written through createWhole")
	}
	key := []gossh.PublicKey{testOptions().Signer.PublicKey()}
	for _, d := range []string{dir, crashDir} {
		if rep := evidence.Verify(d, evidence.Keys{Trusted: key}, evidence.Options{}); d == crashDir && rep.Status != evidence.StatusUnfinalized {
			t.Errorf("the session as a crash before the name leaves it: status %s, want unfinalized: %v", rep.Status, rep.Anomalies)
		}
	}
	before := map[string][]byte{}
	for _, name := range []string{vocab.LogFile, typescriptName, timingName} {
		before[name], _ = os.ReadFile(filepath.Join(crashDir, ptyDirName, name))
	}
	if recovered, err := recoverUnfinalized(crashRoot, testOptions()); err != nil || len(recovered) != 1 {
		t.Fatalf("the restart after a crash mid-recovery: recovered %v, err %v; want the session recovered", recovered, err)
	}
	for _, d := range []string{dir, crashDir} {
		rep := evidence.Verify(d, evidence.Keys{Trusted: key}, evidence.Options{})
		var statements int
		for _, a := range rep.Anomalies {
			switch a.Kind {
			case evidence.KindRecovered:
				statements++
			case evidence.KindUnfinalized:
			default:
				t.Errorf("%s: %s", d, a)
			}
		}
		if rep.Status != evidence.StatusUnfinalized || statements != 1 {
			t.Errorf("%s after recovery: status %s, %d recovery statements; want unfinalized with one", d, rep.Status, statements)
		}
	}
	for name, was := range before {
		if now, _ := os.ReadFile(filepath.Join(crashDir, ptyDirName, name)); !bytes.Equal(now, was) {
			t.Errorf("the recovery changed %s", name)
		}
	}
}

// TestCreateWholeNeverOverwrites: both ways createWhole names a file put
// data under the name whole, and neither replaces a file of that name.
func TestCreateWholeNeverOverwrites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		create func(*sessionDirs, string, []byte) error
	}{
		{"unnamed then linked", (*sessionDirs).createWhole},
		{"named (no O_TMPFILE)", func(d *sessionDirs, name string, data []byte) error {
			return d.createNamedIn(d.pty, wholeFile{name, data})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := makeSessionDirs(t.TempDir(), "run-w", "sess-w")
			if err != nil {
				t.Fatal(err)
			}
			defer d.close()
			if err := d.publish(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(d.path, ptyDirName, vocab.RecoveryFile)
			if err := tc.create(d, vocab.RecoveryFile, []byte("first\n")); err != nil {
				t.Fatal(err)
			}
			if err := tc.create(d, vocab.RecoveryFile, []byte("second\n")); !errors.Is(err, os.ErrExist) {
				t.Errorf("a second create: %v, want it refused as existing", err)
			}
			if b, _ := os.ReadFile(path); string(b) != "first\n" {
				t.Errorf("the file holds %q, want the first data", b)
			}
			if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
				t.Errorf("the pty folder holds %d entries, want the one file", len(entries))
			}
		})
	}
}
