package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// Tests of the examiner's session operands and listing (docs/RECORD.md,
// "Naming a session", "Listing sessions: ls", "Playing a session: play"):
// ids resolved under --root by play, verify and export; ls on each kind of
// folder, its filters and its COMMAND column; play --follow's idle limit.

// runIn runs the built binary in dir with env added to the environment,
// with a deadline, and returns its stdout, its stderr and its exit code.
func runIn(t *testing.T, dir string, env []string, bin string, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within the deadline; stderr:\n%s", filepath.Base(bin), args, e.Bytes())
	}
	return o.Bytes(), e.Bytes(), exitCodeOf(err)
}

// recordAs records a finalized session under root/run/id with the real
// recorder, logged in as user, running command ("" is a shell).
func recordAs(t *testing.T, root, run, id, user, command string, signer gossh.Signer) string {
	t.Helper()
	s, err := recorder.Create(root, recorder.Meta{RunID: run, SessionID: id, Command: command, Term: "xterm",
		Headers: []recorder.Header{{Name: vocab.HeaderLoginUser, Value: user}}}, recorder.Options{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Output([]byte("output of " + id + "\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	return s.Dir()
}

// TestSessionIDs: play, verify and export take RUN/SESSION, or SESSION
// when one run of the root holds it, under --root or $APTL_CAPTURE_ROOT; a
// path that exists wins over an id; an ambiguous SESSION lists its
// candidates; an id that names nothing says where it was looked for and
// how to list the sessions; no message names an internal package.
func TestSessionIDs(t *testing.T) {
	bin := buildCommand(t)
	signer := newTestSigner(t)
	root := t.TempDir()
	recordAs(t, root, "run-a", "only-1", "kali", "", signer)
	recordAs(t, root, "run-a", "twice", "kali", "", signer)
	recordAs(t, root, "run-b", "twice", "kali", "", signer)
	pub := writePubKey(t, signer.PublicKey())
	// A folder named as an id, in the working folder: the path wins.
	cwd := t.TempDir()
	if out, err := exec.Command("cp", "-a", filepath.Join(root, "run-b", "twice"), filepath.Join(cwd, "twice")).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v: %s", err, out)
	}

	for _, tt := range []struct {
		name   string
		env    []string
		args   []string
		code   int
		stdout string   // in stdout
		stderr []string // in stderr, or for verify (which reports a not-a-session in its report) in stdout
	}{
		{name: "play RUN/SESSION", args: []string{"play", "--speed", "1000", "--root", root, "run-a/only-1"}, stdout: "output of only-1\r\n"},
		{name: "play unique SESSION", args: []string{"play", "--speed", "1000", "--root", root, "only-1"}, stdout: "output of only-1\r\n"},
		{name: "play root from the environment", env: []string{"APTL_CAPTURE_ROOT=" + root}, args: []string{"play", "--speed", "1000", "run-b/twice"}, stdout: "output of twice\r\n"},
		{name: "play path wins", args: []string{"play", "--speed", "1000", "--root", root, "twice"}, stdout: "output of twice\r\n"},
		{name: "play not an id", args: []string{"play", "--root", root, "run-a/../twice"}, code: 1, stderr: []string{`"run-a/../twice": no such file or folder, and not a session id`}},
		{name: "verify ids", args: []string{"verify", "--key", pub, "--root", root, "run-a/only-1", "run-b/twice"},
			stdout: filepath.Join(root, "run-b", "twice")},
		{name: "verify unique SESSION", args: []string{"verify", "--key", pub, "--root", root, "only-1"}, stdout: "OK   " + filepath.Join(root, "run-a", "only-1")},
		{name: "verify missing", args: []string{"verify", "--key", pub, "--root", root, "only-1", "run-c/none"}, code: 1,
			stdout: "FAIL run-c/none status=not-a-session: ", stderr: []string{`"run-c/none": no such file or folder, and no session run-c/none under ` + root, "aptl-kali-capture ls " + root}},
		{name: "export RUN/SESSION", args: []string{"export", "--root", root, "run-a/only-1"}, stdout: `"output of only-1\r\n"`},
		{name: "export missing", args: []string{"export", "--root", root, "none"}, code: 1,
			stderr: []string{`"none": no such file or folder, and no run under ` + root + " holds a session none", "ls " + root}},
		{name: "export root missing", args: []string{"export", "--root", filepath.Join(root, "nowhere"), "none"}, code: 1,
			stderr: []string{"cannot be read", "nowhere"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, code := runIn(t, cwd, tt.env, bin, tt.args...)
			if code != tt.code || !strings.Contains(string(out), tt.stdout) {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", tt.args, code, out, stderr, tt.code, tt.stdout)
			}
			for _, w := range tt.stderr {
				if !strings.Contains(string(stderr), w) && !(tt.args[0] == "verify" && strings.Contains(string(out), w)) {
					t.Errorf("%v: stderr %q does not say %q", tt.args, stderr, w)
				}
			}
			if bytes.Contains(stderr, []byte("examine:")) {
				t.Errorf("%v: stderr names an internal package: %q", tt.args, stderr)
			}
		})
	}

	// Ambiguous: from a folder with no "twice" in it.
	for _, cmd := range [][]string{{"play"}, {"verify", "--key", pub}, {"export"}} {
		args := append(cmd, "--root", root, "twice")
		out, stderr, code := runIn(t, t.TempDir(), nil, bin, args...)
		if code != 1 || !strings.Contains(string(stderr)+string(out), `session "twice" is in more than one run under `+root+": run-a/twice, run-b/twice; give RUN/SESSION") {
			t.Errorf("%v: exit %d, %q; want exit 1 listing run-a/twice and run-b/twice", args, code, stderr)
		}
	}
}

// TestLsFolderKinds: ls lists the sessions of a capture root, of one run
// folder, of a harvest (kali-side/ beside mcp-side/) and of one session
// folder, and nothing else: no run, pty/, kali-side/ or mcp-side/ as a
// broken session. The filters and the COMMAND column work on the records:
// the exec command, shell for a shell session.
func TestLsFolderKinds(t *testing.T) {
	bin := buildCommand(t)
	signer := recordertest.Signer()
	root := t.TempDir()
	shell := recordAs(t, root, "run-a", "shell-1", "kali", "", signer)
	recordAs(t, root, "run-a", "exec-1", "root", "id -u; printf '\x1b[2J'", signer)
	recordAs(t, root, "run-b", "exec-2", "kali", "uname -a", signer)
	harvest := recordertest.NewRunDir(t)
	recordertest.Record(t, harvest, recordertest.PTYSpec("harvested-1"))
	if err := os.MkdirAll(filepath.Join(harvest, "mcp-side", "sessions"), 0o700); err != nil {
		t.Fatal(err)
	}
	type row struct {
		lsEntry
		Command *string `json:"command"`
	}
	ls := func(args ...string) []row {
		t.Helper()
		out, stderr, code := runSplit(t, bin, append([]string{"ls", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("ls --json %v: exit %d: %s", args, code, stderr)
		}
		var rows []row
		if err := json.Unmarshal(out, &rows); err != nil {
			t.Fatalf("ls --json %v: %v\n%s", args, err, out)
		}
		return rows
	}
	ids := func(rows []row) (got []string) {
		for _, r := range rows {
			if r.State != "finalized" {
				t.Errorf("%s/%s listed %s (%s): only sessions are listed", r.Run, r.Session, r.State, r.Error)
			}
			got = append(got, r.Run+"/"+r.Session)
		}
		return got
	}
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{root}, []string{"run-a/exec-1", "run-a/shell-1", "run-b/exec-2"}},
		{[]string{filepath.Join(root, "run-a")}, []string{"run-a/exec-1", "run-a/shell-1"}},
		{[]string{harvest}, []string{recordertest.RunID + "/harvested-1"}},
		{[]string{shell}, []string{"run-a/shell-1"}},
		{[]string{"--user", "kali", root}, []string{"run-a/shell-1", "run-b/exec-2"}},
		{[]string{"--since", "1h", "--until", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), root}, []string{"run-a/exec-1", "run-a/shell-1", "run-b/exec-2"}},
		{[]string{"--until", "2000-01-01", root}, nil},
		{[]string{"--status", "in-progress,broken", root}, nil},
		{[]string{"--status", "finalized", "--run", "run-b", root}, []string{"run-b/exec-2"}},
	} {
		if got := ids(ls(tt.args...)); !slices.Equal(got, tt.want) {
			t.Errorf("ls %v: %v, want %v", tt.args, got, tt.want)
		}
	}

	rows := ls(filepath.Join(root, "run-a"))
	if c := rows[0].Command; c == nil || *c != "id -u; printf '\x1b[2J'" {
		t.Errorf("exec-1's command in JSON: %v, want the open record's", c)
	}
	if c := rows[1].Command; c != nil {
		t.Errorf("shell-1's command in JSON: %q, want null", *c)
	}
	table, _, code := runSplit(t, bin, "ls", filepath.Join(root, "run-a"))
	checkTable(t, string(table), 2)
	if code != 0 || !strings.Contains(string(table), ` kali  shell `) || !strings.Contains(string(table), `id -u; printf '\x1b[2J'`) {
		t.Errorf("ls: exit %d; want COMMAND shell for shell-1 and the escaped command for exec-1:\n%s", code, table)
	}

	_, stderr, code := runSplit(t, bin, "ls", "--since", "last week", root)
	if code != 2 || !strings.Contains(string(stderr), `--since: "last week": want RFC 3339`) {
		t.Errorf("ls --since 'last week': exit %d, %q; want a usage error naming the input", code, stderr)
	}
	verified, _, code := runSplit(t, bin, "ls", "--verify", "--key", writePubKey(t, signer.PublicKey()), "--status", "fail", root)
	if code != 0 || len(strings.Split(strings.TrimSpace(string(verified)), "\n")) != 1 {
		t.Errorf("ls --verify --status fail: exit %d, want the header only, every session verifies:\n%s", code, verified)
	}
}

// TestPlayFollowIdleLimit: play --follow of a session that records
// nothing more stops at --idle-limit, exit 0, saying why on stderr.
func TestPlayFollowIdleLimit(t *testing.T) {
	bin := buildCommand(t)
	s, err := recorder.Create(t.TempDir(), recorder.Meta{RunID: "r", SessionID: "quiet-1"}, recorder.Options{Signer: newTestSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(0) })
	if err := s.Output([]byte("then nothing\r\n")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, stderr, code := runSplit(t, bin, "play", "--follow", "--idle-limit", "500ms", s.Dir())
	if code != 0 || string(out) != "then nothing\r\n" || time.Since(start) < 500*time.Millisecond ||
		!strings.Contains(string(stderr), "play: stopped following "+s.Dir()+": nothing new was recorded for 500ms (the idle limit)") ||
		!strings.Contains(string(stderr), "--idle-limit 0") {
		t.Errorf("play --follow --idle-limit 500ms: exit %d after %v, stdout %q, stderr %q", code, time.Since(start), out, stderr)
	}
	if _, stderr, code := runSplit(t, bin, "play", "--idle-limit", "-1s", s.Dir()); code != 2 || !strings.Contains(string(stderr), "--idle-limit: -1s") {
		t.Errorf("play --idle-limit -1s: exit %d, %q; want a usage error", code, stderr)
	}
}

// TestPlayKeysOnTerminal: on a terminal, space pauses play (the next
// chunk, due 1.5 s later, is not written while it lasts), . writes the next
// chunk, q quits at once; keys are not echoed, and the terminal's mode is
// put back when play exits.
func TestPlayKeysOnTerminal(t *testing.T) {
	bin := buildCommand(t)
	s, err := recorder.Create(t.TempDir(), recorder.Meta{RunID: "r", SessionID: "keys-1", Term: "xterm"}, recorder.Options{Signer: newTestSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	for i, chunk := range []string{"first\r\n", "second\r\n", "third\r\n"} {
		if i > 0 {
			time.Sleep(1500 * time.Millisecond)
		}
		if err := s.Output([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(0); err != nil {
		t.Fatal(err)
	}
	play := func(t *testing.T, steer func(master *os.File, term *testutil.LockedBuffer, exited <-chan error)) {
		master, slave, err := pty.Open()
		if err != nil {
			t.Skipf("no pty: %v", err)
		}
		defer master.Close()
		defer slave.Close()
		before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "play", s.Dir())
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var term testutil.LockedBuffer
		go io.Copy(&term, master)
		waitFor(t, 10*time.Second, "the first chunk", func() bool { return strings.Contains(term.String(), "first") })
		steer(master, &term, exited)
		after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if *after != *before {
			t.Errorf("play left the terminal in lflag %#x, it found %#x", after.Lflag, before.Lflag)
		}
	}
	waitExit := func(t *testing.T, exited <-chan error, within time.Duration) {
		t.Helper()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("play: %v", err)
			}
		case <-time.After(within):
			t.Fatalf("play did not exit within %v", within)
		}
	}
	t.Run("pause and step", func(t *testing.T) {
		play(t, func(master *os.File, term *testutil.LockedBuffer, exited <-chan error) {
			master.Write([]byte(" "))
			time.Sleep(2500 * time.Millisecond) // past "second"'s time
			if got := term.String(); strings.Contains(got, "second") || strings.Contains(got, " ") {
				t.Fatalf("paused, the terminal got %q: want no second chunk, and the key unechoed", got)
			}
			master.Write([]byte("."))
			waitFor(t, 10*time.Second, "the stepped chunk", func() bool { return strings.Contains(term.String(), "second") })
			master.Write([]byte("q"))
			waitExit(t, exited, 5*time.Second)
			if got := term.String(); strings.Contains(got, "third") {
				t.Errorf("a step wrote more than one chunk, or q did not stop the play: %q", got)
			}
		})
	})
	t.Run("quit", func(t *testing.T) {
		play(t, func(master *os.File, _ *testutil.LockedBuffer, exited <-chan error) {
			master.Write([]byte("q"))
			waitExit(t, exited, time.Second) // "second" is due 1.5 s after "first"
		})
	})
}

// TestRecordListsLsFilters: docs/RECORD.md's table of ls's filters names
// exactly the filter flags `ls -h` prints, and its --status row exactly the
// states a listing has (examine.States) and the two verdicts.
func TestRecordListsLsFilters(t *testing.T) {
	bin := buildCommand(t)
	help, err := exec.Command(bin, "ls", "-h").Output()
	if err != nil {
		t.Fatalf("ls -h: %v", err)
	}
	var documented, status []string
	for _, row := range testutil.ReadmeTable(t, "../docs/RECORD.md", "### Listing sessions: ls") {
		spans := testutil.CodeSpans(row[0])
		if len(spans) != 1 {
			t.Fatalf("filter row %q: want one flag", row[0])
		}
		flag, _, _ := strings.Cut(spans[0], " ")
		documented = append(documented, flag)
		if !strings.Contains(string(help), "\n  -"+strings.TrimPrefix(flag, "--")+" ") {
			t.Errorf("RECORD.md documents the filter %s, which ls -h does not list", flag)
		}
		if flag == "--status" {
			status = slices.DeleteFunc(testutil.CodeSpans(row[1]), func(s string) bool { return strings.HasPrefix(s, "--") })
		}
	}
	for _, f := range []string{"--run", "--user", "--since", "--until", "--status"} {
		if !slices.Contains(documented, f) {
			t.Errorf("RECORD.md's filter table lacks %s", f)
		}
	}
	want := append(slices.Clone(examine.States), "ok", "fail")
	slices.Sort(want)
	slices.Sort(status)
	if !slices.Equal(status, want) {
		t.Errorf("RECORD.md's --status row names %v; ls takes %v", status, want)
	}
}
