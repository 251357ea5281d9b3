package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/internal/termsafe"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/ship"
)

func init() {
	register("verify", command{summary: "check recorded sessions against their integrity logs and signatures", run: runVerify})
}

// keyFiles collects repeated --key flags.
type keyFiles []string

func (k *keyFiles) String() string     { return strings.Join(*k, ",") }
func (k *keyFiles) Set(v string) error { *k = append(*k, v); return nil }

func runVerify(args []string) int {
	e := newEnvFlags("verify")
	fs := e.FlagSet
	var keys keyFiles
	fs.Var(&keys, "key", "trusted sidecar host key: a .pub file or a known_hosts file (repeatable, required)")
	asJSON := fs.Bool("json", false, "print one JSON document (docs/RECORD.md, \"verify --json\")")
	runDir := fs.String("run-dir", "", "a run folder: <root>/<run_id> as serve writes it, or a harvest (kali-side/ and mcp-side/), whose sessions are also reconciled with the tool server's tee")
	root := rootFlag(e)
	shipped := fs.Bool("shipped", false, "also compare each session with its objects in the bucket (--ship-bucket and the other --ship- settings, AWS credentials from the standard environment): missing parts, wrong digests, extra bytes")
	var store shipSettings
	bindShipFlags(e, &store)
	e.SetSynopsis(progName + " verify --key HOST_KEY.pub [--json] [--root ROOT] [--shipped --ship-bucket BUCKET ...] (" + sessionOperand + "... | --run-dir RUN_DIR)")
	e.SetEpilogue(sessionOperandHelp + "\nA session folder may have any name: the ids the report prints come from the signed record.\n" +
		"A path that is no session folder (a run folder, a harvest, a capture root) is reported not-a-session, with what to give instead.\n" +
		"Exit status: 0 every session ok, 1 something is wrong or unfinished (not-a-session included), 2 a usage error.")
	e.Operands(0, -1)
	if err := e.Parse(args); err != nil {
		return failUsage("verify", err)
	}
	if len(keys) == 0 {
		return failUsage("verify", e.SettingError("key", "missing: the sidecar's host key (its .pub, or a known_hosts file) is what makes the records evidence; %s", hostKeyWhere))
	}
	if (*runDir == "") == (fs.NArg() == 0) {
		return failUsage("verify", e.SettingError("run-dir", "give either session folders or --run-dir, not both and not neither"))
	}
	var shipCfg *ship.Config
	if *shipped {
		cfg, err := store.config(e)
		if err != nil {
			return failUsage("verify", err)
		}
		shipCfg = &cfg
	}
	trusted, err := loadTrustedKeys(keys)
	if err != nil {
		fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture verify: "+err.Error()))
		return exitUsage
	}
	// Each operand is resolved (a path, or an id under --root) before the
	// progress estimate; one that names no session is reported in its
	// place as not-a-session, so --json still prints one document.
	dirs := make([]string, fs.NArg())
	errs := make([]error, fs.NArg())
	var found []string
	for i, arg := range fs.Args() {
		if dirs[i], errs[i] = examine.ResolveSession(root(), arg); errs[i] == nil {
			found = append(found, dirs[i])
		}
	}
	var opts evidence.Options
	if !*asJSON && isTerminal(os.Stderr) {
		if p := newProgress(os.Stderr, estimateBytes(*runDir, found)); p != nil {
			opts.Progress = p.add
			defer p.done()
		}
	}
	var out verifyOutput
	if *runDir != "" {
		rr := examine.VerifyRun(*runDir, trusted, opts)
		out = runOutput(rr)
	} else {
		out.OK, out.Sessions = true, []sessionOutput{}
		for i, arg := range fs.Args() {
			rep := verifyOperand(root(), arg, dirs[i], errs[i], trusted, opts)
			out.OK = out.OK && rep.OK()
			out.Sessions = append(out.Sessions, sessionOutput{Report: rep, Reconcile: []evidence.Anomaly{}})
		}
	}
	if shipCfg != nil {
		compareShipped(&out, *shipCfg)
	}
	out.summarize()
	if *asJSON {
		examine.NewJSONEncoder(os.Stdout).Encode(out)
	} else {
		printOutput(os.Stdout, out)
	}
	if !out.OK {
		return exitFailure
	}
	return exitOK
}

// hostKeyWhere says where the key --key wants is: the sidecar writes its
// host key into its state folder, and the Compose pair's up.sh writes it
// as a known_hosts line.
var hostKeyWhere = "the sidecar's is <state-dir>/" + vocab.HostKeyFile + ".pub (" + defaultStateDir + "/" + vocab.HostKeyFile +
	".pub by default), or compose/local/known_hosts for the Compose pair"

// verifyOperand verifies one operand's session folder. An operand that
// is neither an existing path nor an id is checked as the path it was
// given (VerifySession: "no such folder"); any other operand that names
// no session (an id of none, of several, a linked run) is not-a-session
// with the resolver's reason.
func verifyOperand(root, arg, dir string, err error, keys evidence.Keys, opts evidence.Options) *evidence.Report {
	switch {
	case err == nil:
		return examine.VerifySession(dir, keys, opts)
	case errors.Is(err, examine.ErrNotAnID):
		return examine.VerifySession(arg, keys, opts)
	}
	return evidence.NotASession(arg, sessionError(err, root).Error())
}

// verifyOutput is what verify prints: with --json, as one JSON document
// whose schema docs/RECORD.md states ("verify --json"); field names are
// lowercase and lists are [] when empty, never null.
type verifyOutput struct {
	OK       bool            `json:"ok"` // every session ok, nothing wrong at the run level
	Run      *runOutputInfo  `json:"run,omitempty"`
	Sessions []sessionOutput `json:"sessions"`
	// Summary counts the findings of every session and of the run by
	// class (evidence.ClassCounter), gaps as GapRecorded.
	Summary []evidence.ClassCount `json:"summary"`
}

// summarize fills the sessions' summaries and the whole output's.
func (out *verifyOutput) summarize() {
	all := evidence.ClassCounter{}
	if out.Run != nil {
		all.Add(out.Run.Anomalies, nil)
	}
	for i := range out.Sessions {
		s := &out.Sessions[i]
		c := evidence.ClassCounter{}
		c.Add(s.Anomalies, s.Gaps)
		c.Add(s.Reconcile, nil)
		s.Summary = c.Summary()
		all.Merge(c)
	}
	out.Summary = all.Summary()
}

// runOutputInfo is the run level of --run-dir.
type runOutputInfo struct {
	Dir       string             `json:"dir"`
	Layout    string             `json:"layout"`
	RunID     string             `json:"run_id"`
	Anomalies []evidence.Anomaly `json:"anomalies"`
	Notes     []evidence.Note    `json:"notes"`
}

// sessionOutput is one session's report and, with --run-dir, its
// reconciliation with the tool server's tee.
type sessionOutput struct {
	*evidence.Report
	Tee       string             `json:"tee,omitempty"`
	Reconcile []evidence.Anomaly `json:"reconcile"`
	// Summary counts the session's findings, its reconciliation's and its
	// gaps by class.
	Summary []evidence.ClassCount `json:"summary"`
	// Shipped is verify --shipped's comparison with the bucket.
	Bucket *ship.Comparison `json:"shipped,omitempty"`
}

// compareShipped compares each verified session with its objects in the
// bucket of cfg; a difference, or a store that cannot be asked, makes the
// output not ok.
func compareShipped(out *verifyOutput, cfg ship.Config) {
	for i := range out.Sessions {
		s := &out.Sessions[i]
		if s.Status == evidence.StatusNotASession || s.RunID == "" || s.SessionID == "" {
			continue
		}
		c, err := ship.Compare(context.Background(), cfg, s.Dir, s.RunID, s.SessionID, s.Report.Shipped, s.ShippedSegments)
		if err != nil {
			c.Findings = append(c.Findings, ship.Finding{Kind: ship.FindingStoreUnreadable, Detail: err.Error()})
		}
		if len(c.Findings) > 0 {
			out.OK = false
		}
		s.Bucket = &c
	}
}

func runOutput(rr *examine.RunReport) verifyOutput {
	out := verifyOutput{OK: rr.OK(), Sessions: []sessionOutput{},
		Run: &runOutputInfo{Dir: rr.RunDir, Layout: rr.Layout, RunID: rr.RunID, Anomalies: rr.Anomalies, Notes: rr.Notes}}
	for _, s := range rr.Sessions {
		out.Sessions = append(out.Sessions, sessionOutput{Report: s.Report, Tee: s.Tee, Reconcile: s.Anomalies})
	}
	return out
}

// loadTrustedKeys reads public keys from authorized_keys-style (.pub) or
// known_hosts files; known_hosts @revoked keys are kept as revoked.
func loadTrustedKeys(paths []string) (evidence.Keys, error) {
	var keys evidence.Keys
	for _, p := range paths {
		data, err := readKeyFile(p, maxKeyFileRead)
		if errors.Is(err, fs.ErrNotExist) {
			return keys, fmt.Errorf("--key: %w; %s", err, hostKeyWhere)
		}
		if err != nil {
			return keys, fmt.Errorf("--key: %w", err)
		}
		k, err := evidence.ParseKeys(data, "--key "+p)
		if err != nil {
			return keys, err
		}
		keys.Add(k)
	}
	return keys, nil
}

// maxKeyFileRead bounds what is read of a --key file; evidence.ParseKeys
// refuses anything larger than its own, smaller bound.
const maxKeyFileRead = 8 << 20

// readKeyFile reads at most limit bytes of a key file (a regular file,
// or a pipe: verify --key <(...)), for the key parsers, which refuse what
// is larger than they take.
func readKeyFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// printLine writes one line of the text report. Run and session ids,
// paths and anomaly messages come from hostile files: termsafe.Escape
// keeps their control characters from reaching the terminal.
func printLine(w io.Writer, format string, args ...any) {
	fmt.Fprintln(w, termsafe.Escape(fmt.Sprintf(format, args...)))
}

// verdicts is the first word of a session's line, by status.
var verdicts = map[evidence.Status]string{
	evidence.StatusOK:          "OK  ",
	evidence.StatusInProgress:  "LIVE",
	evidence.StatusUnfinalized: "FAIL",
	evidence.StatusTampered:    "FAIL",
	evidence.StatusNotASession: "FAIL",
}

func printOutput(w io.Writer, out verifyOutput) {
	if r := out.Run; r != nil {
		for _, a := range r.Anomalies {
			printLine(w, "FAIL %s: %s", r.Dir, a)
		}
		for _, n := range r.Notes {
			printLine(w, "note %s: %s", r.Dir, n.Msg)
		}
	}
	for _, s := range out.Sessions {
		printReport(w, s.Report)
		if out.Run != nil && out.Run.Layout == examine.LayoutHarvest && s.Tee == "" {
			printLine(w, "     no tool-server tee for %s", s.SessionID)
		}
		for _, a := range s.Reconcile {
			printLine(w, "     reconcile: %s", a)
		}
		if c := s.Bucket; c != nil {
			printLine(w, "     shipped: segments=%d whole_objects=%d shipped_records=%d findings=%d", c.Segments, c.Whole, c.Claims, len(c.Findings))
			for _, f := range c.Findings {
				file := f.File
				if file == "" {
					file = "(the store)"
				}
				printLine(w, "     shipped %s %s part=%d: %s", f.Kind, file, f.Part, f.Detail)
			}
		}
	}
}

func printReport(w io.Writer, rep *evidence.Report) {
	if rep.Status == evidence.StatusNotASession {
		// Nothing was verified: what the path is, and what to give, is all.
		for _, a := range rep.Anomalies {
			printLine(w, "%s %s status=%s: %s", verdicts[rep.Status], rep.Dir, rep.Status, a.Msg)
		}
		return
	}
	// checkpoints= counts the trusted checkpoints (signed_checkpoints in
	// --json); records= the records that chain.
	printLine(w, "%s %s status=%s run=%s session=%s records=%d checkpoints=%d finalized=%v bytes in=%d out=%d err=%d stored=%d",
		verdicts[rep.Status], rep.Dir, rep.Status, rep.RunID, rep.SessionID, rep.Records, rep.Signed, rep.Finalized,
		rep.Bytes.In, rep.Bytes.Out, rep.Bytes.Err, rep.Bytes.Stored)
	if rep.Status == evidence.StatusInProgress {
		if rep.LastVerifiedSeq < 0 {
			printLine(w, "     in progress: a recorder holds the log; no checkpoint signed yet")
		} else {
			printLine(w, "     in progress: a recorder holds the log; signed through record %d, typescript offset %d", rep.LastVerifiedSeq, rep.LastVerifiedOffset)
		}
	}
	for _, n := range rep.Notes {
		printLine(w, "     note: %s", n.Msg)
	}
	// Gaps are stated even when everything verifies: the record says data
	// went unstored, and so does the report.
	if p := rep.Pcap; p != nil {
		printLine(w, "     pcap: %s%s, %d files, %d packets verified", p.State, reasonSuffix(p.Reason), p.Files, p.Packets)
	}
	if a := rep.Audit; a != nil {
		printLine(w, "     audit: %s%s, %d files, %d records verified", a.State, reasonSuffix(a.Reason), a.Files, a.Records)
	}
	if a := rep.AuditSession; a != nil && a.Terminals() != "" {
		printLine(w, "     audit session %d on %s: %s", a.Ses, a.TTY, a.Terminals())
	}
	for _, g := range rep.Gaps {
		switch g.Stream {
		case vocab.StreamPcap:
			printLine(w, "     gap: record %d, %d packets of the pcap capture: %s", g.Seq, g.Count, g.Reason)
			continue
		case vocab.StreamAudit:
			if g.Reason == vocab.GapAuditRelayDown {
				// The rules were in effect; nothing reached the sidecar.
				printLine(w, "     gap: record %d, the audit witness was blind from %s to %s, the witness relay unreachable: %s%s", g.Seq, g.First, g.Last, g.Reason, stillOpen(g.Error))
				continue
			}
			if g.Last != "" {
				// A window in which the witness was blind: nothing was
				// counted, its rules were out of effect.
				printLine(w, "     gap: record %d, the audit witness was blind from %s to %s, %d rules out of effect: %s%s", g.Seq, g.First, g.Last, g.Count, g.Reason, stillOpen(g.Error))
				continue
			}
			printLine(w, "     gap: record %d, %d audit records or events: %s", g.Seq, g.Count, g.Reason)
			continue
		}
		printLine(w, "     gap: record %d, %d bytes of stream %s: %s", g.Seq, g.Len, g.Stream, g.Reason)
	}
	for _, a := range rep.Anomalies {
		printLine(w, "     %s", a)
	}
}

// stillOpen words an audit window's error: its restore was refused, so it
// was still open at its last instant.
func stillOpen(err string) string {
	if err == "" {
		return ""
	}
	return " (still open then: " + err + ")"
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}
