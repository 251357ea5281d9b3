package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

func init() {
	register("verify", command{summary: "check recorded sessions against their integrity logs and signatures", run: runVerify})
}

// keyFiles collects repeated --key flags.
type keyFiles []string

func (k *keyFiles) String() string     { return strings.Join(*k, ",") }
func (k *keyFiles) Set(v string) error { *k = append(*k, v); return nil }

func runVerify(args []string) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	var keys keyFiles
	fs.Var(&keys, "key", "trusted sidecar host key: a .pub file or a known_hosts file (repeatable, required)")
	asJSON := fs.Bool("json", false, "print one JSON report per session")
	runDir := fs.String("run-dir", "", "a harvested run directory (kali-side/ and mcp-side/): verify every session and reconcile it with the tool server's tee")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: aptl-kali-capture verify --key HOST_KEY.pub [--json] (SESSION_DIR... | --run-dir RUN_DIR)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if len(keys) == 0 || (*runDir == "") == (fs.NArg() == 0) {
		fs.Usage()
		return exitUsage
	}
	trusted, err := loadTrustedKeys(keys)
	if err != nil {
		fmt.Fprintln(os.Stderr, examine.Escape("aptl-kali-capture verify: "+err.Error()))
		return exitUsage
	}
	ok := true
	if *runDir != "" {
		rr := examine.VerifyRunKeys(*runDir, trusted)
		ok = rr.OK()
		printRunReport(os.Stdout, rr, *asJSON)
	} else {
		for _, dir := range fs.Args() {
			rep := examine.VerifyKeys(dir, trusted)
			ok = rep.OK() && ok
			printReport(os.Stdout, rep, *asJSON)
		}
	}
	if !ok {
		return exitFailure
	}
	return exitOK
}

// loadTrustedKeys reads public keys from authorized_keys-style (.pub) or
// known_hosts files; known_hosts @revoked keys are kept as revoked.
func loadTrustedKeys(paths []string) (examine.Keys, error) {
	var keys examine.Keys
	for _, p := range paths {
		data, err := readKeyFile(p)
		if err != nil {
			return keys, fmt.Errorf("--key: %w", err)
		}
		k, err := examine.ParseKeys(data, "--key "+p)
		if err != nil {
			return keys, err
		}
		keys.Add(k)
	}
	return keys, nil
}

// maxKeyFileRead bounds what is read of a --key file; examine.ParseKeys
// refuses anything larger than its own, smaller bound.
const maxKeyFileRead = 8 << 20

func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxKeyFileRead))
}

// printLine writes one line of the text report. Run and session ids,
// paths and anomaly messages come from hostile files: examine.Escape
// keeps their control characters from reaching the terminal.
func printLine(w io.Writer, format string, args ...any) {
	fmt.Fprintln(w, examine.Escape(fmt.Sprintf(format, args...)))
}

func printReport(w io.Writer, rep *examine.Report, asJSON bool) {
	if asJSON {
		examine.NewJSONEncoder(w).Encode(rep)
		return
	}
	verdict := "OK  "
	if !rep.OK() {
		verdict = "FAIL"
	}
	printLine(w, "%s %s run=%s session=%s records=%d signed=%d finalized=%v bytes in=%d out=%d err=%d stored=%d",
		verdict, rep.Dir, rep.RunID, rep.SessionID, rep.Records, rep.Signed, rep.Finalized,
		rep.Bytes.In, rep.Bytes.Out, rep.Bytes.Err, rep.Bytes.Stored)
	// Gaps are stated even when everything verifies: the record says data
	// went unstored, and so does the report.
	if p := rep.Pcap; p != nil {
		printLine(w, "     pcap: %s%s, %d files, %d packets verified", p.State, reasonSuffix(p.Reason), p.Files, p.Packets)
	}
	if a := rep.Audit; a != nil {
		printLine(w, "     audit: %s%s, %d files, %d records verified", a.State, reasonSuffix(a.Reason), a.Files, a.Records)
	}
	for _, g := range rep.Gaps {
		switch g.Stream {
		case vocab.StreamPcap:
			printLine(w, "     gap: record %d, %d packets of the pcap capture: %s", g.Seq, g.Count, g.Reason)
			continue
		case vocab.StreamAudit:
			printLine(w, "     gap: record %d, %d audit records or events: %s", g.Seq, g.Count, g.Reason)
			continue
		}
		printLine(w, "     gap: record %d, %d bytes of stream %s: %s", g.Seq, g.Len, g.Stream, g.Reason)
	}
	for _, a := range rep.Anomalies {
		printLine(w, "     %s", a)
	}
}

func printRunReport(w io.Writer, rr *examine.RunReport, asJSON bool) {
	if asJSON {
		examine.NewJSONEncoder(w).Encode(rr)
		return
	}
	for _, a := range rr.Anomalies {
		printLine(w, "FAIL %s: %s", rr.RunDir, a)
	}
	for _, s := range rr.Sessions {
		printReport(w, s.Report, false)
		if s.Tee == "" {
			printLine(w, "     no tool-server tee for %s", s.SessionID)
		}
		for _, a := range s.Anomalies {
			printLine(w, "     reconcile: %s", a)
		}
	}
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}
