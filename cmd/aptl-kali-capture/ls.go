package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/internal/termsafe"
)

func init() {
	register("ls", command{summary: "list recorded sessions: ids, user, key, start, duration, exit, state, bytes (from the records)", run: runLs})
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
	asJSON := fs.Bool("json", false, "print a JSON array, one object per session")
	verify := fs.Bool("verify", false, "also verify each session (needs --key), as the verify subcommand does")
	var keys keyFiles
	fs.Var(&keys, "key", "with --verify: trusted sidecar host key, a .pub or known_hosts file (repeatable)")
	e.SetSynopsis(progName + " ls [--run RUN] [--json] [--verify --key HOST_KEY.pub] [ROOT]")
	e.SetEpilogue("ROOT is the capture root serve writes: $APTL_CAPTURE_ROOT, else " + defaultRoot + ".\n" +
		"The records are read, not verified, unless --verify is given.")
	e.Operands(0, 1)
	if err := e.Parse(args); err != nil {
		return failUsage("ls", err)
	}
	if *verify && len(keys) == 0 {
		return failUsage("ls", e.SettingError("verify", "needs --key HOST_KEY.pub, the key the sessions are signed with"))
	}
	root := fs.Arg(0)
	if root == "" {
		root = captureRootDefault()
	}
	rows, err := listSessions(root, *run, keys, *verify)
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

// listSessions summarizes the sessions below root, verifying each one
// with the trusted keys when verify is set.
func listSessions(root, run string, keys keyFiles, verify bool) ([]lsRow, error) {
	sums, err := examine.List(root, examine.ListOptions{Run: run})
	if err != nil {
		return nil, err
	}
	rows := make([]lsRow, 0, len(sums)) // [] in JSON, not null
	for _, s := range sums {
		rows = append(rows, lsRow{Summary: s})
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
	return rows, nil
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
	head := "RUN\tSESSION\tUSER\tCLIENT KEY\tSTART\tDURATION\tEXIT\tCLOSE REASON\tIN\tOUT"
	if verified {
		head += "\tVERIFIED"
	}
	fmt.Fprintln(tw, head+"\tSTATE")
	for _, r := range rows {
		cells := []string{r.Run, r.Session, r.User, r.ClientKey, startCell(r.Summary), durationCell(r.Summary),
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
