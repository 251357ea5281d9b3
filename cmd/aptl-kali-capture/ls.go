package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
	"github.com/aptl/aptl-kali-capture/internal/termsafe"
)

func init() {
	register("ls", command{summary: "list recorded sessions: ids, user, command, key, start, duration, exit, state, bytes (from the records)", run: runLs})
}

// lsRow is one session of `ls --json`: the summary, and with --verify the
// verifier's verdict.
type lsRow struct {
	examine.Summary
	Verified *lsVerdict `json:"verified,omitempty"`
}

// lsVerdict is what `ls --verify` says of a session: verify's verdict and
// how many anomalies it found (`verify` prints them).
type lsVerdict struct {
	OK        bool `json:"ok"`
	Anomalies int  `json:"anomalies"`
}

func runLs(args []string) int {
	e := newEnvFlags("ls")
	fs := e.FlagSet
	run := fs.String("run", "", "list the sessions of this run only")
	user := fs.String("user", "", "list the sessions of this login user only")
	since := fs.String("since", "", "list the sessions started at or after this time: "+lsTimeForms)
	until := fs.String("until", "", "list the sessions started before this time (a date: before its end): "+lsTimeForms)
	status := fs.String("status", "", "list the sessions in these states only, comma-separated: "+strings.Join(examine.States, ", ")+
		"; with --verify also ok or fail (the verdict)")
	asJSON := fs.Bool("json", false, "print a JSON array, one object per session")
	verify := fs.Bool("verify", false, "also verify each session (needs --key), as the verify subcommand does")
	var keys keyFiles
	fs.Var(&keys, "key", "with --verify: trusted sidecar host key, a .pub or known_hosts file (repeatable)")
	e.SetSynopsis(progName + " ls [--run RUN] [--user U] [--since T] [--until T] [--status S,...] [--json] [--verify --key HOST_KEY.pub] [FOLDER]")
	e.SetEpilogue("FOLDER is a capture root (as serve writes it), one run folder of it, a harvest (kali-side/ and mcp-side/)\n" +
		"or one session folder; by default the capture root serve writes: $APTL_CAPTURE_ROOT, else " + defaultRoot + ".\n" +
		"The records are read, not verified, unless --verify is given. A filter drops a session it cannot\n" +
		"judge: --user, --since and --until every broken one, which has no open record.")
	e.Operands(0, 1)
	if err := e.Parse(args); err != nil {
		return failUsage("ls", err)
	}
	if *verify && len(keys) == 0 {
		return failUsage("ls", e.SettingError("verify", "needs --key HOST_KEY.pub, the key the sessions are signed with"))
	}
	filter, err := parseLsFilter(e, *user, *since, *until, *status, *verify, time.Now())
	if err != nil {
		return failUsage("ls", err)
	}
	root := fs.Arg(0)
	if root == "" {
		root = captureRootDefault()
	}
	rows, err := listSessions(root, *run, keys, *verify, filter)
	if err != nil {
		fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture ls: "+err.Error()))
		return exitFailure
	}
	if *asJSON {
		examine.NewJSONEncoder(os.Stdout).Encode(rows)
	} else {
		printSessionTable(os.Stdout, rows, *verify)
	}
	for _, r := range rows {
		if r.Verified != nil && !r.Verified.OK {
			return exitFailure
		}
	}
	return exitOK
}

// captureRootDefault is the root serve records to by default.
func captureRootDefault() string {
	if r, ok := os.LookupEnv("APTL_CAPTURE_ROOT"); ok && r != "" {
		return r
	}
	return defaultRoot
}

// listSessions summarizes the sessions below root that the filter keeps,
// verifying each one with the trusted keys when verify is set: the
// record's filters apply first, so only the sessions listed are verified.
func listSessions(root, run string, keys keyFiles, verify bool, filter lsFilter) ([]lsRow, error) {
	sums, err := examine.List(root, examine.ListOptions{Run: run})
	if err != nil {
		return nil, err
	}
	rows := make([]lsRow, 0, len(sums)) // [] in JSON, not null
	for _, s := range sums {
		if filter.keepSummary(s) {
			rows = append(rows, lsRow{Summary: s})
		}
	}
	if !verify {
		return rows, nil
	}
	trusted, err := loadTrustedKeys(keys)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		if rows[i].State == examine.StateBroken {
			rows[i].Verified = &lsVerdict{}
			continue
		}
		rep := evidence.Verify(rows[i].Dir, trusted, evidence.Options{})
		rows[i].Verified = &lsVerdict{OK: rep.OK(), Anomalies: len(rep.Anomalies)}
	}
	return slices.DeleteFunc(rows, func(r lsRow) bool { return !filter.keepVerdict(r.Verified) }), nil
}

// Verdicts --status takes with --verify (the VERIFIED column's words).
const (
	lsVerdictOK   = "ok"
	lsVerdictFail = "fail"
)

// lsTimeForms is what --since and --until take, for their -h texts.
const lsTimeForms = "RFC 3339 (2026-12-04T08:00:00Z), a date (2026-12-04, UTC) or a duration ago (2h, 90m, 45s)"

// lsFilter is what ls's filters keep; a zero field keeps everything.
type lsFilter struct {
	user         string
	since, until time.Time
	states       []string // examine.States
	verdicts     []string // lsVerdictOK, lsVerdictFail
}

// parseLsFilter reads the filters' flags; an error names the flag and the
// value it does not take, and what it does take.
func parseLsFilter(e *cliconfig.Flags, user, since, until, status string, verify bool, now time.Time) (lsFilter, error) {
	f := lsFilter{user: user}
	var err error
	if f.since, err = parseLsTime(e, "since", since, now, false); err != nil {
		return f, err
	}
	if f.until, err = parseLsTime(e, "until", until, now, true); err != nil {
		return f, err
	}
	if !f.since.IsZero() && !f.until.IsZero() && !f.since.Before(f.until) {
		return f, e.SettingError("until", "%q is not after --since %q: no session can match", until, since)
	}
	if status == "" {
		return f, nil
	}
	for _, w := range strings.Split(status, ",") {
		w = strings.TrimSpace(w)
		switch {
		case slices.Contains(examine.States, w):
			f.states = append(f.states, w)
		case w == lsVerdictOK || w == lsVerdictFail:
			if !verify {
				return f, e.SettingError("status", "%q is a verdict: it needs --verify (and --key)", w)
			}
			f.verdicts = append(f.verdicts, w)
		default:
			return f, e.SettingError("status", "%q is not a state (%s) nor, with --verify, a verdict (%s, %s)",
				w, strings.Join(examine.States, ", "), lsVerdictOK, lsVerdictFail)
		}
	}
	return f, nil
}

// parseLsTime reads one of lsTimeForms; "" is no bound. A date is its
// start in UTC, or for an upper bound (end) its end: --until 2026-12-04
// keeps that day's sessions.
func parseLsTime(e *cliconfig.Flags, name, v string, now time.Time, end bool) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		if end {
			t = t.AddDate(0, 0, 1)
		}
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, e.SettingError(name, "%q: a duration ago must be positive", v)
		}
		return now.Add(-d), nil
	}
	return time.Time{}, e.SettingError(name, "%q: want %s", v, lsTimeForms)
}

// keepSummary applies the filters the records answer; a broken session has
// no user and no start, so --user, --since and --until drop it.
func (f lsFilter) keepSummary(s examine.Summary) bool {
	switch {
	case f.user != "" && s.User != f.user,
		len(f.states) > 0 && !slices.Contains(f.states, s.State):
		return false
	case f.since.IsZero() && f.until.IsZero():
		return true
	case s.Start == nil,
		!f.since.IsZero() && s.Start.Before(f.since),
		!f.until.IsZero() && !s.Start.Before(f.until):
		return false
	}
	return true
}

// keepVerdict applies --status's verdicts to a verified session.
func (f lsFilter) keepVerdict(v *lsVerdict) bool {
	if len(f.verdicts) == 0 || v == nil {
		return true
	}
	word := lsVerdictFail
	if v.OK {
		word = lsVerdictOK
	}
	return slices.Contains(f.verdicts, word)
}

// maxCell bounds a text cell: a forged record's megabyte user name must
// not bury the table. JSON carries the whole value.
const maxCell = 64

// printSessionTable writes one aligned line per session. Every value from
// the records goes through termsafe.Escape (control characters become
// visible escapes, so tab cannot misalign and ESC cannot steer the
// terminal) and is cut at maxCell characters.
func printSessionTable(w io.Writer, rows []lsRow, verified bool) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	head := "RUN\tSESSION\tUSER\tCOMMAND\tCLIENT KEY\tSTART\tDURATION\tEXIT\tCLOSE REASON\tIN\tOUT"
	if verified {
		head += "\tVERIFIED"
	}
	fmt.Fprintln(tw, head+"\tSTATE")
	for _, r := range rows {
		cells := []string{r.Run, r.Session, r.User, commandCell(r.Summary), r.ClientKey, startCell(r.Summary), durationCell(r.Summary),
			exitCell(r.Summary), r.CloseReason, strconv.FormatInt(r.BytesIn, 10), strconv.FormatInt(r.BytesOut, 10)}
		if verified {
			cells = append(cells, verdictCell(r.Verified))
		}
		for i, c := range cells {
			cells[i] = cell(c)
		}
		// Last and uncut: a broken session's reason can be long, and the
		// last column needs no alignment.
		cells = append(cells, termsafe.Escape(stateCell(r.Summary)))
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

// cell escapes s for the terminal and cuts it at maxCell characters; an
// empty value is "-".
func cell(s string) string {
	s = termsafe.Escape(s)
	if s == "" {
		return "-"
	}
	if utf8.RuneCountInString(s) > maxCell {
		s = string([]rune(s)[:maxCell-1]) + "…"
	}
	return s
}

// commandCell is the exec command, or "shell" for a shell session (JSON's
// null tells it from an exec of a command named shell).
func commandCell(s examine.Summary) string {
	switch {
	case s.Command != nil:
		return *s.Command
	case s.Start == nil:
		return "" // broken: no open record
	}
	return "shell"
}

func startCell(s examine.Summary) string {
	if s.Start == nil {
		return ""
	}
	return s.Start.UTC().Format(time.RFC3339)
}

func durationCell(s examine.Summary) string {
	if s.Start == nil {
		return ""
	}
	d := time.Duration(s.Seconds * float64(time.Second)).Round(time.Second)
	if s.State == examine.StateInProgress {
		return d.String() + "+"
	}
	return d.String()
}

func exitCell(s examine.Summary) string {
	switch {
	case s.Signal != "":
		return "signal " + s.Signal
	case s.ExitCode != nil:
		return strconv.Itoa(*s.ExitCode)
	}
	return ""
}

// stateCell is the state, and for a broken session why.
func stateCell(s examine.Summary) string {
	if s.Error != "" {
		return s.State + ": " + s.Error
	}
	return s.State
}

func verdictCell(v *lsVerdict) string {
	switch {
	case v == nil:
		return ""
	case v.OK:
		return "ok"
	case v.Anomalies == 0:
		return "FAIL" // a broken session: its state says why
	}
	return fmt.Sprintf("FAIL (%d anomalies; run verify)", v.Anomalies)
}
