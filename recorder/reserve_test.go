package recorder

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"golang.org/x/sys/unix"
)

// volumes are the file systems a capture root may be on: both allocate
// differently (pages against blocks and a journal), and both must end a
// full disk in a finalized record.
var volumes = []struct {
	name  string
	mount func(testing.TB) string
}{
	{"tmpfs", func(tb testing.TB) string { return testutil.SmallVolume(tb, "2m") }},
	{"ext4", func(tb testing.TB) string { return testutil.SmallExt4(tb, 8) }},
}

// closeRecord returns the attributes of dir's close record.
func closeRecord(t *testing.T, dir string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, ptyDirName, vocab.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r integrity.Record
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Type == vocab.TypeClose {
			return r.Attrs
		}
	}
	t.Fatal("no close record")
	return nil
}

// checkOnlyRecordFiles fails unless the session's pty folder holds the
// three record files only, and the reserve folder nothing.
func checkOnlyRecordFiles(t *testing.T, root, dir string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, ptyDirName))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	if want := []string{vocab.LogFile, vocab.TimingFile, vocab.TypescriptFile}; !slices.Equal(names, want) {
		t.Errorf("pty folder holds %v, want %v", names, want)
	}
	if left, _ := os.ReadDir(filepath.Join(root, vocab.SidecarDir, reserveDir)); len(left) != 0 {
		t.Errorf("reserve folder keeps %d entries after close", len(left))
	}
}

// TestFullVolumeStillFinalizes: the volume fills while a session writes
// output. The transcript's write fails (nothing more is stored, which
// the broker answers by forwarding nothing more), and Close still writes
// the trailer, the close record with its reason and the last checkpoint
// on the session's reserve: the record verifies ok, with the bytes not
// stored as a gap.
func TestFullVolumeStillFinalizes(t *testing.T) {
	for _, vol := range volumes {
		t.Run(vol.name, func(t *testing.T) {
			root := vol.mount(t)
			s := createSession(t, root, Meta{RunID: "r", SessionID: "full"}, testOptions())
			mustOK(t, s.Output([]byte("before the disk filled\r\n")))
			testutil.Fill(t, root)
			chunk := bytes.Repeat([]byte("x"), 4096)
			var werr error
			for i := 0; i < 10000 && werr == nil; i++ {
				werr = s.Output(chunk)
			}
			if !errors.Is(werr, syscall.ENOSPC) {
				t.Fatalf("writing to a full volume: %v, want ENOSPC", werr)
			}
			if err := s.Close(1, Header{Name: vocab.HeaderCloseReason, Value: vocab.CloseDiskFull}); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Close = %v, want the recording's ENOSPC returned", err)
			}
			rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{})
			if rep.Status != evidence.StatusOK || !rep.Finalized || len(rep.Anomalies) != 0 {
				t.Fatalf("status %s finalized %v anomalies %v, want ok", rep.Status, rep.Finalized, rep.Anomalies)
			}
			if !slices.ContainsFunc(rep.Gaps, func(g evidence.Gap) bool { return g.Reason == vocab.GapWriteFailed && g.Len > 0 }) {
				t.Errorf("gaps %+v, want the bytes not stored as a %s gap", rep.Gaps, vocab.GapWriteFailed)
			}
			a := closeRecord(t, s.Dir())
			if a[vocab.HeaderCloseReason] != vocab.CloseDiskFull || !strings.Contains(a["write_error"], "no space left") {
				t.Errorf("close record reason %q write_error %q, want %s and the disk named", a[vocab.HeaderCloseReason], a["write_error"], vocab.CloseDiskFull)
			}
			ts, err := os.ReadFile(filepath.Join(s.Dir(), ptyDirName, typescriptName))
			mustOK(t, err)
			if !bytes.Contains(ts, []byte("\nScript done on ")) {
				t.Error("the typescript has no done line")
			}
			checkOnlyRecordFiles(t, root, s.Dir())
		})
	}
}

// TestTornLogWriteOnFullVolume: a log record that meets the full volume
// part-way (the log's last page or block has room for its start) is cut
// back, never left torn; it is written, whole, before the close record
// once the reserve gives room, and the record verifies ok.
func TestTornLogWriteOnFullVolume(t *testing.T) {
	for _, vol := range volumes {
		t.Run(vol.name, func(t *testing.T) {
			root := vol.mount(t)
			s := createSession(t, root, Meta{RunID: "r", SessionID: "torn"}, testOptions())
			mustOK(t, s.Output([]byte("hello\r\n")))
			testutil.Fill(t, root)
			logPath := filepath.Join(s.Dir(), ptyDirName, vocab.LogFile)
			if fi, err := os.Stat(logPath); err != nil || fi.Size()%4096 == 0 {
				t.Fatalf("log size %v (%v): want one that leaves room in its last page, so the write is torn", fi.Size(), err)
			}
			big := map[string]string{"request": "env", "value": strings.Repeat("v", 16<<10)}
			if err := s.Event(vocab.TypeRequest, big); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Event on a full volume = %v, want ENOSPC", err)
			}
			data, err := os.ReadFile(logPath)
			mustOK(t, err)
			if len(data) == 0 || data[len(data)-1] != '\n' {
				t.Fatalf("the log ends in a torn record (%d bytes)", len(data))
			}
			s.Close(1, Header{Name: vocab.HeaderCloseReason, Value: vocab.CloseDiskFull})
			rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{})
			if rep.Status != evidence.StatusOK || len(rep.Anomalies) != 0 {
				t.Fatalf("status %s anomalies %v, want ok", rep.Status, rep.Anomalies)
			}
			data, err = os.ReadFile(logPath)
			mustOK(t, err)
			if !bytes.Contains(data, []byte(big["value"])) {
				t.Error("the record the full volume held back was never written")
			}
		})
	}
}

// TestCutFileStillTampered: a real cut of a file a signature vouches for
// is still tampered: the whole-record rule never excuses missing bytes.
func TestCutFileStillTampered(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "cut"})
	mustOK(t, s.Output(bytes.Repeat([]byte("y"), 5000)))
	mustOK(t, s.Close(0))
	if rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{}); rep.Status != evidence.StatusOK {
		t.Fatalf("before the cut: %s %v", rep.Status, rep.Anomalies)
	}
	for _, name := range []string{typescriptName, vocab.LogFile} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "copy")
			mustOK(t, os.CopyFS(dir, os.DirFS(s.Dir())))
			path := filepath.Join(dir, ptyDirName, name)
			fi, err := os.Stat(path)
			mustOK(t, err)
			mustOK(t, os.Truncate(path, fi.Size()-1))
			if name == vocab.LogFile {
				// Cut back to a whole record, as the writer would: the
				// last checkpoint is gone.
				data, _ := os.ReadFile(path)
				mustOK(t, os.Truncate(path, int64(bytes.LastIndexByte(data, '\n')+1)))
			}
			if rep := evidence.Verify(dir, evidence.Keys{Trusted: trusted()}, evidence.Options{}); rep.Status == evidence.StatusOK {
				t.Fatalf("a cut %s verifies ok", name)
			}
		})
	}
	path := filepath.Join(s.Dir(), ptyDirName, typescriptName)
	fi, err := os.Stat(path)
	mustOK(t, err)
	mustOK(t, os.Truncate(path, fi.Size()-100))
	leaves(s, evidence.StatusTampered)
	if rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{}); rep.Status != evidence.StatusTampered {
		t.Fatalf("a typescript cut by 100 bytes: %s, want tampered", rep.Status)
	}
}

// TestClosingRecordsFitTheReserve measures what Close writes with the
// longest close headers the broker gives and a failure to state, against
// the tails the reserve becomes (reserve.go): each takes less than a
// quarter of its tail.
func TestClosingRecordsFitTheReserve(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "close"})
	mustOK(t, s.Output([]byte("x")))
	s.mu.Lock()
	s.err = errors.New("recorder: write typescript: " + strings.Repeat("e", 512))
	s.mu.Unlock()
	sizes := func() (log, tm, ts int64) {
		for _, p := range []struct {
			name string
			n    *int64
		}{{vocab.LogFile, &log}, {timingName, &tm}, {typescriptName, &ts}} {
			fi, err := os.Stat(filepath.Join(s.Dir(), ptyDirName, p.name))
			mustOK(t, err)
			*p.n = fi.Size()
		}
		return
	}
	log0, tm0, ts0 := sizes()
	s.Close(255, Header{Name: vocab.HeaderCloseReason, Value: vocab.CloseDiskFull}, Header{Name: vocab.HeaderExitSignal, Value: "KILL"},
		Header{Name: vocab.HeaderNotice, Value: strings.Repeat("n", 512)})
	log1, tm1, ts1 := sizes()
	t.Logf("close wrote %d bytes of log, %d of timing, %d of typescript", log1-log0, tm1-tm0, ts1-ts0)
	if log1-log0 > logTail/4 || tm1-tm0 > timingTail/4 || ts1-ts0 > tsTail/4 || logTail+timingTail+tsTail > reserveBytes*3/4 {
		t.Errorf("closing writes %d/%d/%d bytes against tails %d/%d/%d of a %d reserve: the margin is gone", log1-log0, tm1-tm0, ts1-ts0, logTail, timingTail, tsTail, reserveBytes)
	}
}

// TestCloseRecordMeetsFullVolume: nothing failed while the session ran,
// and its close record is the first write the full volume refuses (the
// log's last page has 50 bytes of room): Close draws on the reserve then,
// and the record is finalized.
func TestCloseRecordMeetsFullVolume(t *testing.T) {
	for _, vol := range volumes {
		t.Run(vol.name, func(t *testing.T) {
			root := vol.mount(t)
			s := createSession(t, root, Meta{RunID: "r", SessionID: "late"}, testOptions())
			logPath := filepath.Join(s.Dir(), ptyDirName, vocab.LogFile)
			size := func() int64 {
				fi, err := os.Stat(logPath)
				mustOK(t, err)
				return fi.Size()
			}
			before := size()
			mustOK(t, s.Event(vocab.TypeRequest, map[string]string{"v": "x"}))
			overhead := size() - before - 1
			room := 4096 - size()%4096
			if room < overhead+100 {
				room += 4096
			}
			mustOK(t, s.Event(vocab.TypeRequest, map[string]string{"v": strings.Repeat("x", int(room-overhead-50))}))
			if got := 4096 - size()%4096; got < 40 || got > 60 {
				t.Fatalf("the log's last page has %d bytes of room, want about 50", got)
			}
			testutil.Fill(t, root)
			if err := s.Close(0, Header{Name: vocab.HeaderCloseReason, Value: vocab.CloseShellExited}); err != nil {
				t.Fatalf("Close on the reserve = %v, want nil: the closing writes took the reserved room", err)
			}
			if rep := evidence.Verify(s.Dir(), evidence.Keys{Trusted: trusted()}, evidence.Options{}); rep.Status != evidence.StatusOK {
				t.Fatalf("status %s anomalies %v, want ok", rep.Status, rep.Anomalies)
			}
			checkOnlyRecordFiles(t, root, s.Dir())
		})
	}
}

// TestNoRoomForTheReserveRefusesTheSession: a volume that cannot hold a
// session's reserve refuses the session, naming it, and leaves no folder.
func TestNoRoomForTheReserveRefusesTheSession(t *testing.T) {
	root := testutil.SmallVolume(t, "1m")
	mustOK(t, os.MkdirAll(filepath.Join(root, "r"), 0o700))
	testutil.Fill(t, root)
	_, err := Create(root, Meta{RunID: "r", SessionID: "refused"}, testOptions())
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "closing records") {
		t.Fatalf("Create on a full volume = %v, want ENOSPC naming the closing records' reserve", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "r", "refused")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused session left its folder: %v", err)
	}
}

// TestSweepReserves: a named reserve a crash left (where O_TMPFILE is
// missing) is removed at start; the folder itself stays.
func TestSweepReserves(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, vocab.SidecarDir, reserveDir)
	mustOK(t, os.MkdirAll(dir, 0o700))
	mustOK(t, os.WriteFile(filepath.Join(dir, "r-1-0x1"), make([]byte, 100), 0o600))
	mustOK(t, SweepReserves(root))
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Fatalf("after the sweep: %v %v, want an empty folder", left, err)
	}
	if err := SweepReserves(t.TempDir()); err != nil {
		t.Fatalf("sweep of a root without reserves = %v", err)
	}
}

// allocated returns the bytes f's blocks take on the volume.
func allocated(t *testing.T, f *os.File) int64 {
	t.Helper()
	var st syscall.Stat_t
	mustOK(t, syscall.Fstat(int(f.Fd()), &st))
	return st.Blocks * 512
}

// TestFirstFailureTakesTheReserveAsTails: the session's first write
// failure gives the reserve back and takes its room at once as the three
// record files' tails (allocated past their ends, their sizes unchanged),
// so the closing records have it; Close trims what they did not use and
// the reserve's own file is closed. Runs on whatever volume the test's
// temporary folder is on; a file system without fallocate skips.
func TestFirstFailureTakesTheReserveAsTails(t *testing.T) {
	root := t.TempDir()
	probe, err := os.Create(filepath.Join(root, "probe"))
	mustOK(t, err)
	if err := unix.Fallocate(int(probe.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 4096); err != nil || allocated(t, probe) == 0 {
		t.Skipf("the temporary folder's file system takes no preallocated tail (fallocate KEEP_SIZE: %v): nothing to measure", err)
	}
	probe.Close()
	mustOK(t, os.Remove(probe.Name()))
	s := createSession(t, root, Meta{RunID: "r", SessionID: "tails"}, testOptions())
	mustOK(t, s.Output([]byte("before the failure\r\n")))
	s.mu.Lock()
	reserve := s.reserve
	files := []*os.File{s.log, s.tm.File, s.ts.File}
	tails := []int64{logTail, timingTail, tsTail}
	var before []int64
	for _, f := range files {
		mustOK(t, f.Sync())
		before = append(before, allocated(t, f))
	}
	s.fail(errors.New("the volume failed a write"))
	var during []int64
	for _, f := range files {
		during = append(during, allocated(t, f))
	}
	drawn := s.reserve == nil
	s.mu.Unlock()
	if reserve == nil || !drawn {
		t.Fatalf("reserve held %v, drawn on at the first failure %v", reserve != nil, drawn)
	}
	for i, f := range files {
		if during[i] < before[i]+tails[i] {
			t.Errorf("%s: %d bytes allocated after the failure, want at least its %d and a %d-byte tail", f.Name(), during[i], before[i], tails[i])
		}
	}
	if _, err := reserve.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the reserve's file after the failure: %v, want it closed (its room given back)", err)
	}
	s.Close(0)
	for i, f := range files {
		fi, err := os.Stat(filepath.Join(s.Dir(), vocab.PTYDir, filepath.Base(f.Name())))
		mustOK(t, err)
		var st syscall.Stat_t
		mustOK(t, syscall.Stat(filepath.Join(s.Dir(), vocab.PTYDir, filepath.Base(f.Name())), &st))
		if st.Blocks*512 >= fi.Size()+tails[i] {
			t.Errorf("%s: %d bytes allocated for %d after Close, want the unused tail trimmed", f.Name(), st.Blocks*512, fi.Size())
		}
	}
}

// TestCloseGivesTheReserveBack: a session that never failed closes its
// reserve's file at Close.
func TestCloseGivesTheReserveBack(t *testing.T) {
	s := newTestSession(t, Meta{RunID: "r", SessionID: "unused"})
	reserve := s.reserve
	mustOK(t, s.Close(0))
	if reserve == nil {
		t.Fatal("a session without a reserve")
	}
	if _, err := reserve.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the reserve's file after Close: %v, want it closed", err)
	}
}
