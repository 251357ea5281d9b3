package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
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
		fmt.Fprintf(os.Stderr, "aptl-kali-capture verify: %v\n", err)
		return exitUsage
	}
	ok := true
	if *runDir != "" {
		rr := integrity.VerifyRun(*runDir, trusted)
		ok = rr.OK()
		printRunReport(os.Stdout, rr, *asJSON)
	} else {
		for _, dir := range fs.Args() {
			rep := integrity.Verify(dir, trusted)
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
// known_hosts files.
func loadTrustedKeys(paths []string) ([]gossh.PublicKey, error) {
	var keys []gossh.PublicKey
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		n := len(keys)
		for i, line := range bytes.Split(data, []byte("\n")) {
			line = bytes.TrimSpace(line)
			if len(line) == 0 || line[0] == '#' {
				continue
			}
			if k, _, _, _, err := gossh.ParseAuthorizedKey(line); err == nil {
				keys = append(keys, k)
			} else if _, _, k, _, _, err := gossh.ParseKnownHosts(line); err == nil {
				keys = append(keys, k)
			} else {
				return nil, fmt.Errorf("--key %s line %d: not a public key or known_hosts line", p, i+1)
			}
		}
		if len(keys) == n {
			return nil, fmt.Errorf("--key %s: no keys", p)
		}
	}
	return keys, nil
}

func printReport(w io.Writer, rep *integrity.Report, asJSON bool) {
	if asJSON {
		json.NewEncoder(w).Encode(rep)
		return
	}
	verdict := "OK  "
	if !rep.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "%s %s run=%s session=%s records=%d signed=%d finalized=%v bytes in=%d out=%d err=%d stored=%d\n",
		verdict, rep.Dir, rep.RunID, rep.SessionID, rep.Records, rep.Signed, rep.Finalized,
		rep.Bytes.In, rep.Bytes.Out, rep.Bytes.Err, rep.Bytes.Stored)
	// Gaps are stated even when everything verifies: the record says data
	// went unstored, and so does the report.
	for _, g := range rep.Gaps {
		fmt.Fprintf(w, "     gap: record %d, %d bytes of stream %s: %s\n", g.Seq, g.Len, g.Stream, g.Reason)
	}
	for _, a := range rep.Anomalies {
		fmt.Fprintf(w, "     %s\n", a)
	}
}

func printRunReport(w io.Writer, rr *integrity.RunReport, asJSON bool) {
	if asJSON {
		json.NewEncoder(w).Encode(rr)
		return
	}
	for _, a := range rr.Anomalies {
		fmt.Fprintf(w, "FAIL %s: %s\n", rr.RunDir, a)
	}
	for _, s := range rr.Sessions {
		printReport(w, s.Report, false)
		if s.Tee == "" {
			fmt.Fprintf(w, "     no tool-server tee for %s\n", s.SessionID)
		}
		for _, a := range s.Anomalies {
			fmt.Fprintf(w, "     reconcile: %s\n", a)
		}
	}
}
