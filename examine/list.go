package examine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// States of a listed session (Summary.State). ls reads a session without
// verifying it, so its states are not verify's; the two it shares with
// verify's statuses (in progress, unfinalized) are evidence's words.
const (
	// StateFinalized: the log has its close record.
	StateFinalized = "finalized"
	// StateInProgress: no close record yet, and a recorder holds the
	// log's lock: a session still being recorded (Recording, the rule
	// verify uses too).
	StateInProgress = string(evidence.StatusInProgress)
	// StateUnfinalized: no close record and no recorder holds the log: a
	// session a crash left open that no restarted sidecar has recovered
	// yet (or a copy taken before its close, where the lock cannot show).
	StateUnfinalized = string(evidence.StatusUnfinalized)
	// StateRecovered: no close record, and a restarted sidecar wrote
	// the recovery statement (vocab.RecoveryFile).
	StateRecovered = "recovered"
	// StateBroken: the folder or its log cannot be read as a session's;
	// Summary.Error says why.
	StateBroken = "broken"
)

// States are the states of a listed session, in the order a life runs
// through them; ls --status takes them.
var States = []string{StateInProgress, StateFinalized, StateUnfinalized, StateRecovered, StateBroken}

// MaxListEntries bounds the entries read from one folder of a capture root
// (runs in the root, sessions in a run): a folder with more is listed up to
// the bound and reported, never read whole into memory.
const MaxListEntries = 100000

// Summary is what the records say about one session, without verifying
// them (`aptl-kali-capture ls`). Every string comes from a hostile file:
// print it through Escape or NewJSONEncoder.
type Summary struct {
	Run     string `json:"run"`
	Session string `json:"session"`
	Dir     string `json:"dir"`
	State   string `json:"state"`
	// User and ClientKey are the open record's APTL_LOGIN_USER and
	// APTL_CLIENT_KEY (the key's SHA256 fingerprint).
	User      string `json:"user"`
	ClientKey string `json:"client_key"`
	// Command is the open record's exec command (vocab.AttrCommand); nil
	// for a shell session, and for a broken one (State says which).
	Command *string `json:"command"`
	// Start is the open record's time (nil for a broken session); Seconds
	// runs to the close record, or to the last record so far.
	Start   *time.Time `json:"start"`
	Seconds float64    `json:"duration_seconds"`
	// ExitCode is the close record's (nil before it); Signal names the
	// signal that ended the process, if one did.
	ExitCode    *int   `json:"exit_code"`
	Signal      string `json:"signal,omitempty"`
	CloseReason string `json:"close_reason,omitempty"`
	// BytesIn and BytesOut count every byte of the input and output
	// (stdout and stderr) streams, stored or not: the close record's
	// totals, or the data records so far.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// Error says why a session is broken, or what stopped the reading of
	// its log part way.
	Error string `json:"error,omitempty"`
}

// ListOptions select what List reads.
type ListOptions struct {
	// Run lists that run only ("" for every run): in a capture root the
	// run folder of that name, elsewhere the sessions whose record (or,
	// without one, whose folder) names that run.
	Run string
}

// The kinds of folder List takes (FolderKind).
const (
	// FolderCaptureRoot is what serve writes: <root>/<run>/<session>/pty/.
	FolderCaptureRoot = "capture root"
	// FolderRun is one run of it: <run>/<session>/pty/.
	FolderRun = "run folder"
	// FolderHarvest is the lab's harvest of a run: kali-side/<session>/pty/
	// beside mcp-side/ (LayoutHarvest).
	FolderHarvest = "harvest"
	// FolderSession is one session: <session>/pty/.
	FolderSession = "session folder"
)

// FolderKind tells what dir holds, from its shape alone (nothing is
// verified): a session folder has pty/; a harvest has kali-side/ or
// mcp-side/ (runLayout, the rule verify --run-dir uses); a run folder has
// a folder with pty/ among its entries (the first MaxListEntries); anything
// else is taken for a capture root, whose entries are runs. Entries that
// are links are not followed, so a link cannot make a capture root look
// like a run.
func FolderKind(dir string) string {
	if _, err := os.Lstat(filepath.Join(dir, vocab.PTYDir)); err == nil {
		return FolderSession
	}
	if runLayout(dir) == LayoutHarvest {
		return FolderHarvest
	}
	entries, err := listFolder(dir)
	if err != nil {
		return FolderCaptureRoot // List says why it cannot be read
	}
	for _, name := range entries.names {
		if st, err := os.Lstat(filepath.Join(dir, name)); err != nil || !st.IsDir() {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, name, vocab.PTYDir)); err == nil {
			return FolderRun
		}
	}
	return FolderCaptureRoot
}

// List summarizes every session in dir, which may be a capture root, a run
// folder, a harvest or one session folder (FolderKind), in run and session
// name order: the folders that hold sessions (a run, kali-side/, pty/) are
// never listed as sessions of their own. dir is the caller's choice and is
// followed; below it, a run or session that is a symbolic link or not a
// folder is listed as broken, not followed. A session whose log cannot be
// read is a Summary with State StateBroken; only a folder that cannot be
// listed is an error.
func List(dir string, opts ListOptions) ([]Summary, error) {
	if opts.Run != "" && !validListName(opts.Run) {
		return nil, fmt.Errorf("run %q is not a folder name", opts.Run)
	}
	var out []Summary
	switch FolderKind(dir) {
	case FolderSession:
		session, run := folderNames(dir)
		out = []Summary{Summarize(dir, run, session)}
	case FolderHarvest:
		// A kali-side/ that is missing or a link is one broken line.
		run, _ := folderNames(dir)
		out = listRun(filepath.Join(dir, vocab.KaliSideDir), run)
	case FolderRun:
		run, _ := folderNames(dir)
		out = listRun(dir, run)
	default:
		return listRoot(dir, opts)
	}
	if opts.Run != "" {
		out = slices.DeleteFunc(out, func(s Summary) bool { return s.Run != opts.Run })
	}
	return out, nil
}

// folderNames are the names of dir and of its parent, from its absolute
// path, so that "." or "pty/.." still name the session and its run (the
// open record's ids replace them when it has them).
func folderNames(dir string) (name, parent string) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return filepath.Base(abs), filepath.Base(filepath.Dir(abs))
}

// listRoot summarizes the sessions of a capture root, run by run.
func listRoot(root string, opts ListOptions) ([]Summary, error) {
	var runs []string
	var out []Summary
	if opts.Run != "" {
		runs = []string{opts.Run}
	} else {
		entries, err := listFolder(root)
		if err != nil {
			return nil, err
		}
		// The sidecar's own folder holds no session.
		runs = slices.DeleteFunc(entries.names, func(name string) bool { return name == vocab.SidecarDir })
		if entries.truncated {
			out = append(out, Summary{Dir: root, State: StateBroken, Error: fmt.Sprintf("more than %d entries; the rest are not listed", MaxListEntries)})
		}
	}
	for _, run := range runs {
		out = append(out, listRun(filepath.Join(root, run), run)...)
	}
	return out, nil
}

// listRun summarizes the sessions of one run folder, dir, named run.
func listRun(dir, run string) []Summary {
	if err := checkRealDir(dir); err != nil {
		return []Summary{{Run: run, Dir: dir, State: StateBroken, Error: err.Error()}}
	}
	entries, err := listFolder(dir)
	if err != nil {
		return []Summary{{Run: run, Dir: dir, State: StateBroken, Error: err.Error()}}
	}
	var out []Summary
	for _, name := range entries.names {
		out = append(out, Summarize(filepath.Join(dir, name), run, name))
	}
	if entries.truncated {
		out = append(out, Summary{Run: run, Dir: dir, State: StateBroken, Error: fmt.Sprintf("more than %d entries; the rest are not listed", MaxListEntries)})
	}
	return out
}

// folderEntries are the names in a folder, sorted, at most MaxListEntries.
type folderEntries struct {
	names     []string
	truncated bool
}

// listFolder reads at most MaxListEntries names of dir, in batches, so a
// folder of millions of entries costs a bounded amount of memory.
func listFolder(dir string) (folderEntries, error) {
	f, err := os.Open(dir)
	if err != nil {
		return folderEntries{}, err
	}
	defer f.Close()
	var fe folderEntries
	for {
		batch, err := f.ReadDir(1024)
		for _, e := range batch {
			if len(fe.names) == MaxListEntries {
				fe.truncated = true
				break
			}
			fe.names = append(fe.names, e.Name())
		}
		if fe.truncated || errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return fe, err
		}
	}
	slices.Sort(fe.names)
	return fe, nil
}

// checkRealDir refuses a path that is a symbolic link or not a folder.
func checkRealDir(path string) error {
	st, err := os.Lstat(path)
	switch {
	case err != nil:
		return err
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link, which is not followed in a capture root", path)
	case st.Mode().IsRegular():
		return fmt.Errorf("%s is a regular file, not a folder", path)
	case !st.IsDir():
		return fmt.Errorf("%s is %s, not a folder", path, safefs.DescribeMode(st.Mode()))
	}
	return nil
}

// validListName reports whether s names one folder (no separator, not
// . or ..).
func validListName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`)
}

// Summarize reads the records of the session folder dir, listed as run and
// session (the folder names; the open record's ids replace them when it
// has them). It never fails: what cannot be read makes the summary broken
// and says why.
func Summarize(dir, run, session string) Summary {
	s := Summary{Run: run, Session: session, Dir: dir, State: StateBroken}
	if err := checkRealDir(dir); err != nil {
		s.Error = err.Error()
		return s
	}
	var sum logSummary
	err := evidence.ReadRecords(dir, vocab.LogFile, sum.add)
	if err == nil {
		err = sum.err
	}
	if sum.open == nil {
		if err == nil {
			err = errors.New("no open record")
		}
		s.Error = fmt.Sprintf("%s: %v", vocab.LogFile, err)
		return s
	}
	if err != nil {
		s.Error = fmt.Sprintf("%s: %v", vocab.LogFile, err)
	}
	sum.fill(&s)
	if s.State == StateInProgress {
		switch {
		case hasRecovery(dir):
			s.State = StateRecovered
		case !evidence.Recording(dir):
			s.State = StateUnfinalized
		}
	}
	return s
}

// logSummary accumulates what Summarize reports while the log is read.
type logSummary struct {
	open, close *integrity.Record
	last        time.Time
	in, out     int64 // data and gap records' lengths by stream
	err         error // a record that does not decode
}

// add takes the log's line i. A last line without its newline is a record
// being written: it is left for the next look.
func (l *logSummary) add(i int, text []byte, complete bool) bool {
	if !complete {
		return false
	}
	var r integrity.Record
	if err := json.Unmarshal(text, &r); err != nil {
		l.err = fmt.Errorf("record %d: %w", i, err)
		return false
	}
	if i == 0 {
		if r.Type != vocab.TypeOpen {
			l.err = fmt.Errorf("record 0 is %q, not an open record", r.Type)
			return false
		}
		l.open = &r
	}
	l.last = r.Time
	if d := r.Data; d != nil {
		switch d.Stream {
		case vocab.StreamIn:
			l.in += d.Len
		case vocab.StreamOut, vocab.StreamErr:
			l.out += d.Len
		}
	}
	if r.Type == vocab.TypeClose {
		l.close = &r
		return false
	}
	return true
}

// fill copies the summary into s: the close record's totals and ending
// when there is one, else the data records' totals so far.
func (l *logSummary) fill(s *Summary) {
	oa := l.open.Attrs
	if id := oa[vocab.AttrRunID]; id != "" {
		s.Run = id
	}
	if id := oa[vocab.AttrSessionID]; id != "" {
		s.Session = id
	}
	s.User, s.ClientKey = oa[vocab.HeaderLoginUser], oa[vocab.HeaderClientKey]
	if c := oa[vocab.AttrCommand]; c != "" {
		s.Command = &c
	}
	start := l.open.Time
	s.Start = &start
	s.BytesIn, s.BytesOut = l.in, l.out
	s.State = StateInProgress
	end := l.last
	if c := l.close; c != nil {
		s.State, end = StateFinalized, c.Time
		ca := c.Attrs
		if n, err := strconv.Atoi(ca[vocab.AttrExitCode]); err == nil {
			s.ExitCode = &n
		}
		s.Signal, s.CloseReason = ca[vocab.HeaderExitSignal], ca[vocab.HeaderCloseReason]
		s.BytesIn = attrInt(ca, vocab.AttrCloseBytes+vocab.StreamIn, l.in)
		s.BytesOut = attrInt(ca, vocab.AttrCloseBytes+vocab.StreamOut, 0) + attrInt(ca, vocab.AttrCloseBytes+vocab.StreamErr, 0)
	}
	if d := end.Sub(start); d > 0 {
		s.Seconds = d.Seconds()
	}
}

// attrInt is a whole-number attribute, or def when it is missing or not one.
func attrInt(a map[string]string, name string, def int64) int64 {
	n, err := strconv.ParseInt(a[name], 10, 64)
	if err != nil || n < 0 {
		return def
	}
	return n
}

// hasRecovery reports whether dir's pty folder holds a recovery file.
func hasRecovery(dir string) bool {
	f, _, err := safefs.OpenRegular(dir, vocab.PTYDir+"/"+vocab.RecoveryFile)
	if err != nil {
		return false
	}
	f.Close()
	return true
}
