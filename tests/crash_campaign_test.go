package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// The crash campaign: the built server is killed with SIGKILL at random
// moments while 1 to 4 sessions stream, and restarted on the same capture
// root and state, again and again. TestSidecarKilledMidSession and
// TestFaultSIGKILLWithOpenSessions show one cut; this shows that no
// moment of a session's life is one recovery gets wrong.

// crashLoad is what a session in the campaign does while the server is
// killed. Each one starts by printing a marker the shell computes (so the
// echo of the typed command does not match it): the session is streaming
// once the client sees it.
type crashLoad int

const (
	// loadSmall: one short line every 10 ms, many small records.
	loadSmall crashLoad = iota
	// loadBulk: output as fast as the PTY carries it.
	loadBulk
	// loadTyping: the client types a command a key at a time, 5-45 ms
	// apart, and the shell runs each.
	loadTyping
	crashLoads
	// loadStarting: a session the kill cuts while it starts (its shell
	// requested 0-10 ms before), in one round in three; not in the
	// streaming loads' turns.
	loadStarting = crashLoads
)

var crashLoadNames = [crashLoads + 1]string{"small-writes", "bulk", "typing", "starting"}

const crashStartMarker = `echo "GO_$((40+2))"; `

var crashLoadCommands = [crashLoads]string{
	loadSmall:  crashStartMarker + `i=0; while :; do i=$((i+1)); echo "small $i"; sleep 0.01; done` + "\n",
	loadBulk:   crashStartMarker + `seq 1 5000000` + "\n",
	loadTyping: crashStartMarker + "\n",
}

var crashShellUp, crashStarted = regexp.MustCompile(`UP_42\r\n`), regexp.MustCompile(`GO_42\r\n`)

// crashSeed is APTL_CAPTURE_CRASH_SEED when set (to replay a failed
// campaign's schedule), otherwise new for each run.
func crashSeed(t *testing.T) uint64 {
	if s := os.Getenv("APTL_CAPTURE_CRASH_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("APTL_CAPTURE_CRASH_SEED=%q is not an unsigned integer", s)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// fileSnapshot is every regular file under a session folder, by its path
// relative to the folder, with its bytes.
type fileSnapshot map[string][]byte

func snapshotFiles(t *testing.T, dir string) fileSnapshot {
	t.Helper()
	snap := fileSnapshot{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file (%v)", path, d.Type())
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		snap[rel] = b
		return err
	})
	if err != nil {
		t.Fatalf("snapshot of %s: %v", dir, err)
	}
	return snap
}

// recoveryAdds is the one file recovery must add to a session folder: the
// recovery statement beside the log; recoveryManifest the two it may add
// after it, the session's signed manifest (a restart killed between the
// two leaves none). Recovery appends to no file (the log is evidence, and
// may end in a torn line: recorder.Recover), so every file present at the
// crash must hold exactly its bytes afterwards, no more and no fewer, and
// no other file may appear or disappear.
var (
	recoveryAdds     = filepath.Join(vocab.PTYDir, vocab.RecoveryFile)
	recoveryManifest = []string{vocab.ManifestFile, vocab.ManifestSigFile}
)

// compareSnapshot checks after against the crash snapshot before under
// that rule, with allowNew the files after may have that before has not,
// and returns the bytes compared and what differs.
func compareSnapshot(before, after fileSnapshot, allowNew ...string) (compared int64, problems []string) {
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range before {
			if !yield(k) {
				return
			}
		}
	}) {
		was := before[name]
		now, ok := after[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s (%d bytes at the crash) is gone", name, len(was)))
		case !bytes.Equal(now, was):
			problems = append(problems, fmt.Sprintf("%s changed: %d bytes at the crash, %d now, first difference at %d", name, len(was), len(now), firstDiff(now, was)))
		}
		compared += int64(len(was))
	}
	for name := range after {
		if _, ok := before[name]; !ok && !slices.Contains(allowNew, name) {
			problems = append(problems, fmt.Sprintf("%s appeared after the crash", name))
		}
	}
	return compared, problems
}

// cutSession is a session a crash cut, with its folder's bytes right
// after the kill.
type cutSession struct {
	dir   string
	load  crashLoad
	crash int
	snap  fileSnapshot
	// stmt is the recovery file a restart killed during its recovery
	// left, if any.
	stmt []byte
}

// crashVerifyOutput is the part of `verify --json` the campaign reads.
type crashVerifyOutput struct {
	OK       bool
	Sessions []evidence.Report
}

// TestCrashCampaign: 100 SIGKILLs (5 in the short form), each at a random
// moment 0-500 ms after 1 to 4 sessions began streaming (small writes,
// bulk output, or typing at a person's pace, in turn), with --sync interval
// or strict at random; after each kill the server is started again on the
// same capture root and state. For every session a crash cut:
//   - before the restart, the examiner says unfinalized, never tampered;
//   - the restart recovers it (its log says so, none fails), and verify
//     (the command, --json) then says status unfinalized, with exactly one
//     recovery statement and no other anomaly than the unfinalized one;
//   - the recovery record states the typescript's and timing's sizes and
//     digests exactly as they were at the crash;
//   - every file under the session folder holds exactly the bytes it held
//     at the kill, and recovery added only its recovery file
//     (compareSnapshot); a later crash and restart change none of them.
//
// One restart in four is itself killed while its recovery runs; it too
// must leave the crash's bytes unchanged, and each session with no
// recovery file or a whole one (verify: unfinalized), which the next
// restart leaves as it is while it recovers the rest.
//
// One round in three also starts a session 0-10 ms before the kill: one
// whose open record made it is checked like the others; one cut before
// its open record is counted and shown in the summary (a known finding,
// see loadStarting), not yet failed.
//
// The schedule is random but seeded; the seed is logged, and
// APTL_CAPTURE_CRASH_SEED replays it.
func TestCrashCampaign(t *testing.T) {
	crashes, maxDelay := 5, 500*time.Millisecond
	if slowTests {
		crashes = 100
	}
	if v := os.Getenv("APTL_CAPTURE_CRASHES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100000 {
			t.Fatalf("APTL_CAPTURE_CRASHES=%q: want a whole number from 1 to 100000", v)
		}
		crashes = n
	}
	seed := crashSeed(t)
	t.Logf("crash campaign seed %d (APTL_CAPTURE_CRASH_SEED=%d replays the schedule)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	bin := buildForLiveTest(t)
	work := t.TempDir()
	began := time.Now()

	var sessions, recovered, rechecked, failures int
	var interrupted, interruptedMidway int // restarts killed during their recovery; of them, those that had recovered some sessions, not all
	var tornLog, unaccounted, unsigned int // sessions whose log ended torn, with typescript bytes past it, with unsigned records
	var heldAfterKill int                  // sessions whose log lock outlived the killed server for a moment
	var bytesCompared int64
	var perLoad [crashLoads + 1]int
	cutStarts := map[string]int{} // starts cut before an open record, by what they left
	var startsBeforePublish int   // starts the kill cut before they published their record
	// Where the wall time goes, for the summary: starts (with the wait for
	// recovery), opening sessions, streaming until the kill, and checking.
	var tStart, tOpen, tStream, tCheck time.Duration
	mark := time.Now()
	phase := func(d *time.Duration) { now := time.Now(); *d += now.Sub(mark); mark = now }
	fail := func(format string, args ...any) {
		t.Helper()
		failures++
		t.Errorf(format, args...)
	}
	var cut, recoveredLast []cutSession // cut by the last crash; recovered at the last start
	pub := filepath.Join(work, "aptl-dev", "state", "ssh_host_ed25519_key.pub")
	for round := 0; ; round++ {
		// One restart in four is killed too, 0-60 ms after it opened its
		// port, while its recovery runs: what it leaves must be the
		// crash's bytes and, per session, no recovery file or a whole one.
		pending := len(cut)
		if pending > 0 && rng.IntN(4) == 0 {
			ls := startLiveServerIn(t, bin, work)
			time.Sleep(time.Duration(rng.Int64N(int64(60 * time.Millisecond))))
			if err := ls.srv.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			ls.wait()
			interrupted++
			for i, s := range cut {
				after := snapshotFiles(t, s.dir)
				n, problems := compareSnapshot(s.snap, after, append(recoveryManifest, recoveryAdds)...)
				bytesCompared += n
				for _, p := range problems {
					fail("crash %d, %s session %s, after a restart killed during its recovery: %s", s.crash, crashLoadNames[s.load], s.dir, p)
				}
				if stmt, ok := after[recoveryAdds]; ok {
					pending--
					cut[i].stmt = stmt
					if rep := evidence.Verify(s.dir, evidence.Keys{Trusted: []gossh.PublicKey{ls.hostKey}}, evidence.Options{}); rep.Status != evidence.StatusUnfinalized {
						fail("crash %d, %s session %s, its recovery killed after its file was named: status %s, want unfinalized: %v",
							s.crash, crashLoadNames[s.load], s.dir, rep.Status, rep.Anomalies)
					}
				}
			}
			if pending > 0 && pending < len(cut) {
				interruptedMidway++
			}
		}

		mode := []string{"interval", "strict"}[rng.IntN(2)]
		ls := startLiveServerIn(t, bin, work, "--sync", mode)
		if len(cut) > 0 {
			n, bad := waitRecoveryFinished(t, ls)
			if n != pending || bad != 0 {
				fail("restart after crash %d: %d sessions recovered, %d failed, want %d and 0; logs:\n%s", round-1, n, bad, pending, ls.logs.String())
			}
			phase(&tStart)
			// The sessions recovered at the previous start: this crash
			// and restart's recovery changed none of their bytes,
			// recovery file included. Removed only now, once the
			// recovery that listed them is done, to keep the volume and
			// the next start's scan small.
			for _, s := range recoveredLast {
				n, problems := compareSnapshot(s.snap, snapshotFiles(t, s.dir))
				bytesCompared += n
				rechecked++
				for _, p := range problems {
					fail("crash %d, %s session %s, after a later crash and restart: %s", s.crash, crashLoadNames[s.load], s.dir, p)
				}
				if err := os.RemoveAll(s.dir); err != nil {
					t.Fatal(err)
				}
			}
			recoveredLast = nil
			var dirs []string
			for _, s := range cut {
				dirs = append(dirs, s.dir)
			}
			out, err := exec.Command(bin, append([]string{"verify", "--key", pub, "--json"}, dirs...)...).Output()
			var doc crashVerifyOutput
			if code := exitCodeOf(err); code != 1 || json.Unmarshal(out, &doc) != nil || len(doc.Sessions) != len(cut) {
				t.Fatalf("verify --json of the sessions crash %d cut: exit %d (want 1, unfinished), output:\n%s", round-1, code, out)
			}
			for i, s := range cut {
				what := fmt.Sprintf("crash %d (sync %s), %s session %s", s.crash, mode, crashLoadNames[s.load], s.dir)
				after := snapshotFiles(t, s.dir)
				rec, ok := checkRecoveredSession(what, &doc.Sessions[i], s, after, fail)
				if ok {
					recovered++
				}
				// What the kill cut through, so the summary shows the
				// campaign reached the states that matter.
				if !bytes.HasSuffix(s.snap[filepath.Join(vocab.PTYDir, vocab.LogFile)], []byte("\n")) {
					tornLog++
				}
				if l := rec.Attrs["unaccounted_len"]; l != "" && l != "0" {
					unaccounted++
				}
				if u := rec.Attrs[vocab.AttrUnsignedRecords]; u != "" && u != "none" {
					unsigned++
				}
				n, problems := compareSnapshot(s.snap, after, append(recoveryManifest, recoveryAdds)...)
				bytesCompared += n
				for _, p := range problems {
					fail("%s, after recovery: %s", what, p)
				}
				if s.stmt != nil && !bytes.Equal(after[recoveryAdds], s.stmt) {
					fail("%s: the recovery file a killed restart left was changed by the next one", what)
				}
				s.snap = after
				recoveredLast = append(recoveredLast, s)
			}
			cut = nil
		}
		phase(&tCheck)
		if round == crashes {
			if err := ls.srv.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			ls.wait()
			break
		}

		// 1 to 4 sessions stream; the loads take turns. All are open,
		// their shells answering, before any load starts, so that no
		// bulk output slows the next one's start.
		open := 1 + rng.IntN(4)
		stop := make(chan struct{})
		var clients []*gossh.Client
		var shells []*shellSession
		for j := 0; j < open; j++ {
			c, err := gossh.Dial("tcp", ls.addr, ls.config)
			if err != nil {
				t.Fatalf("crash %d: dial: %v\nlogs:\n%s", round, err, ls.logs.String())
			}
			clients = append(clients, c)
			id := fmt.Sprintf("c%03d-%d", round, j)
			ss := openShell(t, c, map[string]string{"APTL_SESSION_ID": id, "APTL_RUN_ID": "crash"}, 24, 80)
			ss.send("echo \"UP_$((40+2))\"\n")
			shells = append(shells, ss)
			load := crashLoad(sessions % int(crashLoads))
			sessions++
			perLoad[load]++
			cut = append(cut, cutSession{dir: ls.sessionDir("crash", id), load: load, crash: round})
		}
		for _, ss := range shells { // the shells start at once
			ss.waitOutput(crashShellUp)
		}
		for j, ss := range shells {
			ss.send(crashLoadCommands[cut[j].load])
		}
		for j, ss := range shells {
			ss.waitOutput(crashStarted)
			if cut[j].load == loadTyping {
				go typeAtPace(ss, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), stop)
			}
		}
		phase(&tOpen)
		delay := time.Duration(rng.Int64N(int64(maxDelay)))
		var starting string // the session starting at the kill, if any
		if rng.IntN(3) == 0 {
			c, err := gossh.Dial("tcp", ls.addr, ls.config)
			if err != nil {
				t.Fatalf("crash %d: dial: %v\nlogs:\n%s", round, err, ls.logs.String())
			}
			clients = append(clients, c)
			starting = fmt.Sprintf("c%03d-start", round)
			go startShell(c, starting)
			delay = time.Duration(rng.Int64N(int64(10 * time.Millisecond)))
		}
		time.Sleep(delay)
		if err := ls.srv.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		ls.wait()
		close(stop)
		for _, c := range clients {
			c.Close()
		}
		phase(&tStream)
		if starting != "" {
			dir := ls.sessionDir("crash", starting)
			switch state := cutStartState(t, dir, ls.hostKey); state {
			case "":
				sessions++
				perLoad[loadStarting]++
				cut = append(cut, cutSession{dir: dir, load: loadStarting, crash: round})
			case "no-folder": // the kill came before the start published its record: nothing to recover
				startsBeforePublish++
			default:
				// A start publishes its folder only with its open record
				// (recorder/sessiondir.go): a folder without one is a
				// start the crash made unrecoverable, or one verify calls
				// tampered.
				cutStarts[state]++
				fail("crash %d: a session start cut before its open record left a folder: %s", round, state)
			}
		}
		// The bytes on disk at the crash, before any restart reads them;
		// the examiner already says unfinalized, not tampered.
		for i := range cut {
			cut[i].snap = snapshotFiles(t, cut[i].dir)
			rep, held := verifyOnceReleased(cut[i].dir, ls.hostKey)
			if held {
				heldAfterKill++
			}
			if rep.Status != evidence.StatusUnfinalized {
				fail("crash %d (sync %s), %s session %s, before the restart: status %s, want unfinalized: %v",
					round, mode, crashLoadNames[cut[i].load], cut[i].dir, rep.Status, rep.Anomalies)
			}
		}
	}
	t.Logf("crash campaign summary: seed=%d crashes=%d sessions=%d (small-writes=%d bulk=%d typing=%d starting=%d) recovered=%d rechecked=%d bytes_compared=%d cut_states: torn_log=%d ts_past_log=%d unsigned_records=%d log_held_after_kill=%d restarts_killed_in_recovery=%d (midway=%d) starts_cut_before_publish=%d starts_cut_before_open_record=%v failures=%d wall=%s (starts %s, opening %s, streaming %s, checks %s)",
		seed, crashes, sessions, perLoad[loadSmall], perLoad[loadBulk], perLoad[loadTyping], perLoad[loadStarting], recovered, rechecked, bytesCompared,
		tornLog, unaccounted, unsigned, heldAfterKill, interrupted, interruptedMidway, startsBeforePublish, cutStarts, failures, time.Since(began).Round(time.Millisecond),
		tStart.Round(time.Millisecond), tOpen.Round(time.Millisecond), tStream.Round(time.Millisecond), tCheck.Round(time.Millisecond))
}

// startShell asks c for a PTY shell as session id, ignoring every
// error: the kill comes while it does.
func startShell(c *gossh.Client, id string) {
	s, err := c.NewSession()
	if err != nil {
		return
	}
	s.Setenv("APTL_SESSION_ID", id)
	s.Setenv("APTL_RUN_ID", "crash")
	if s.RequestPty("xterm", 24, 80, gossh.TerminalModes{gossh.ECHO: 1}) == nil {
		s.Shell()
	}
}

// cutStartState says what a session start the kill cut left in dir: ""
// when its log holds the open record (a session cut like the streaming
// ones), otherwise the state: no folder, or a folder whose log is missing
// or holds no record, with verify's status.
func cutStartState(t *testing.T, dir string, key gossh.PublicKey) string {
	t.Helper()
	if _, err := os.Lstat(dir); os.IsNotExist(err) {
		return "no-folder"
	}
	rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{key}}, evidence.Options{})
	// A launch the kill caught between fork and exec holds the log's
	// lock for an instant longer: in-progress, then unfinalized.
	for i := 0; i < 100 && rep.Status == evidence.StatusInProgress; i++ {
		time.Sleep(10 * time.Millisecond)
		rep = evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{key}}, evidence.Options{})
	}
	if rep.Records > 0 {
		return ""
	}
	if _, err := os.Lstat(filepath.Join(dir, vocab.PTYDir, vocab.LogFile)); err != nil {
		return "no-log/" + string(rep.Status)
	}
	return "log-without-records/" + string(rep.Status)
}

// typeAtPace types `echo typed N` lines into ss a key at a time, 5-45 ms
// apart, until stop is closed or the connection is gone. It runs beside
// the test's goroutine, so it reports nothing: the kill ends it.
func typeAtPace(ss *shellSession, r *rand.Rand, stop <-chan struct{}) {
	for n := 0; ; n++ {
		for _, b := range []byte(fmt.Sprintf("echo typed %d\n", n)) {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(5+r.IntN(41)) * time.Millisecond):
			}
			if _, err := ss.stdin.Write([]byte{b}); err != nil {
				return
			}
		}
	}
}

var recoveryFinished = regexp.MustCompile(`msg="recovery of unfinalized sessions finished" recovered=(\d+) failed=(\d+)`)

// waitRecoveryFinished waits for the restarted server's recovery to end
// and returns the sessions it recovered and those it failed to.
func waitRecoveryFinished(t *testing.T, ls *liveServer) (recovered, failed int) {
	t.Helper()
	var m []string
	waitFor(t, 60*time.Second, "the end of the restart's recovery", func() bool {
		m = recoveryFinished.FindStringSubmatch(ls.logs.String())
		return m != nil
	})
	recovered, _ = strconv.Atoi(m[1])
	failed, _ = strconv.Atoi(m[2])
	return recovered, failed
}

// checkRecoveredSession checks verify's report of a recovered session and
// its recovery record against the crash snapshot, and returns the record
// and whether everything held.
func checkRecoveredSession(what string, rep *evidence.Report, s cutSession, after fileSnapshot, fail func(string, ...any)) (rec integrity.Record, ok bool) {
	ok = true
	bad := func(format string, args ...any) {
		ok = false
		fail("%s: "+format, append([]any{what}, args...)...)
	}
	var statements int
	for _, a := range rep.Anomalies {
		switch a.Kind {
		case evidence.KindRecovered:
			statements++
		case evidence.KindUnfinalized:
		default:
			bad("verify found %s: %s", a.Kind, a.Msg)
		}
	}
	if rep.Status != evidence.StatusUnfinalized || rep.Finalized || statements != 1 {
		bad("verify says status %s, finalized %v, %d recovery statements; want unfinalized with one: %v", rep.Status, rep.Finalized, statements, rep.Anomalies)
	}
	lines := bytes.SplitAfter(after[recoveryAdds], []byte("\n"))
	if len(lines) == 0 || json.Unmarshal(lines[0], &rec) != nil || rec.Type != vocab.TypeRecovery {
		bad("no recovery record in %s", recoveryAdds)
		return rec, false
	}
	for _, f := range []struct{ name, size, sum string }{
		{vocab.TypescriptFile, vocab.AttrTSSize, vocab.AttrTSSHA256},
		{vocab.TimingFile, vocab.AttrTMSize, vocab.AttrTMSHA256},
	} {
		was := s.snap[filepath.Join(vocab.PTYDir, f.name)]
		sum := sha256.Sum256(was)
		if rec.Attrs[f.size] != strconv.Itoa(len(was)) || rec.Attrs[f.sum] != hex.EncodeToString(sum[:]) {
			bad("the recovery record states %s %s bytes, sha256 %s; at the crash it held %d, sha256 %x",
				f.name, rec.Attrs[f.size], rec.Attrs[f.sum], len(was), sum)
		}
	}
	if want := strconv.Itoa(rep.Records - 1); rec.Attrs["last_record"] != want {
		bad("the recovery record continues from record %s; the log's last record that checks out is %s", rec.Attrs["last_record"], want)
	}
	return rec, ok
}

// TestCompareSnapshot: the campaign's byte rule fails on each way a
// recovery could touch what a crash left: a byte changed, a byte
// appended, a byte cut, a file removed, a file added; and it lets the
// recovery file appear only where it is allowed.
func TestCompareSnapshot(t *testing.T) {
	log := filepath.Join(vocab.PTYDir, vocab.LogFile)
	crash := fileSnapshot{log: []byte("{\"seq\":0}\n{\"se"), "pty/typescript": []byte("Script started\nabc")}
	changed := func(f func(fileSnapshot)) fileSnapshot {
		c := fileSnapshot{}
		for k, v := range crash {
			c[k] = bytes.Clone(v)
		}
		f(c)
		return c
	}
	for _, tc := range []struct {
		name     string
		after    fileSnapshot
		allowNew []string
		want     string // in the problem found; "" for none
	}{
		{"unchanged", changed(func(fileSnapshot) {}), nil, ""},
		{"recovery file added where allowed", changed(func(c fileSnapshot) { c[recoveryAdds] = []byte("{}\n") }), []string{recoveryAdds}, ""},
		{"recovery file added where not allowed", changed(func(c fileSnapshot) { c[recoveryAdds] = []byte("{}\n") }), nil, "appeared"},
		{"other file added", changed(func(c fileSnapshot) { c["pty/other"] = nil }), []string{recoveryAdds}, "appeared"},
		{"torn line completed", changed(func(c fileSnapshot) { c[log] = append(c[log], "q\":1}\n"...) }), []string{recoveryAdds}, "first difference at 14"},
		{"byte changed", changed(func(c fileSnapshot) { c["pty/typescript"][16] = 'x' }), nil, "first difference at 16"},
		{"byte cut", changed(func(c fileSnapshot) { c["pty/typescript"] = c["pty/typescript"][:17] }), nil, "first difference at 17"},
		{"file removed", changed(func(c fileSnapshot) { delete(c, log) }), nil, "gone"},
	} {
		n, problems := compareSnapshot(crash, tc.after, tc.allowNew...)
		if n != int64(len(crash[log])+len(crash["pty/typescript"])) {
			t.Errorf("%s: %d bytes compared", tc.name, n)
		}
		if got := strings.Join(problems, "; "); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: problems %q, want one with %q", tc.name, got, tc.want)
		}
	}
}

// logReleaseBound bounds how long a cut session's log may stay locked once
// the server that recorded it is gone. A session process the server was
// starting when it was killed holds a copy of every descriptor between
// its fork and its exec, the log's (and so its flock) included, until its
// exec closes them (close-on-exec): verify rightly says in-progress for
// that moment. A lock held longer is a holder that should not exist.
const logReleaseBound = 10 * time.Second

// verifyOnceReleased verifies dir once no process holds its log's lock,
// and says whether one still held it right after the kill.
func verifyOnceReleased(dir string, hostKey gossh.PublicKey) (rep *evidence.Report, held bool) {
	deadline := time.Now().Add(logReleaseBound)
	for {
		rep = evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{hostKey}}, evidence.Options{})
		if rep.Status != evidence.StatusInProgress || time.Now().After(deadline) {
			return rep, held
		}
		held = true
		time.Sleep(20 * time.Millisecond) // polling interval, bounded by logReleaseBound
	}
}
