package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/examine/webplayer"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/termsafe"
)

func init() {
	register("export", command{summary: "export a session: asciicast for asciinema, an offline web player page, or its signed head for ssh-keygen", run: runExport})
}

// Names of the files `export --format head` writes.
const (
	headMessageFile = "head.txt"
	headSigFile     = "head.sig"
	headCertFile    = "head-cert.pub" // a session key's certificate, where one signs
)

func runExport(args []string) int {
	e := newEnvFlags("export")
	fs := e.FlagSet
	format := fs.String("format", "asciicast", "asciicast (to --out or stdout), html (a web player page to --out or stdout; with --run-dir, one per session and index.html into --out) or head (head.txt and head.sig, and head-cert.pub for a session signed by a key of its own, into --out, default .)")
	out := fs.String("out", "", "output file (asciicast, html) or directory (head, html with --run-dir)")
	// Typed input stays out of a shareable copy unless asked for, as
	// `asciinema rec` records stdin only with --stdin (examine.CastOptions).
	input := fs.Bool("input", false, "asciicast, html: include the typed input (\"i\" events; the page's input pane); it holds every typed byte, unechoed passwords included")
	var keys keyFiles
	fs.Var(&keys, "key", "html: trusted sidecar host key (.pub or known_hosts, repeatable); the page's banner shows the verifier's verdict, and says \"not verified\" without one")
	runDir := fs.String("run-dir", "", "html: a run folder (as verify --run-dir takes); one page per session into the --out folder, and index.html")
	root := rootFlag(e)
	e.SetSynopsis(progName + " export [--format asciicast|html|head] [--out PATH] [--input] [--key HOST_KEY.pub] [--root ROOT] (" + sessionOperand + " | --format html --run-dir RUN_DIR --out DIR)")
	e.SetEpilogue(sessionOperandHelp + "\n\n" +
		"Check an exported head with stock OpenSSH:\n" +
		"  echo \"aptl-kali-capture $(cat ssh_host_ed25519_key.pub)\" > allowed_signers\n" +
		"  ssh-keygen -Y verify -f allowed_signers -I aptl-kali-capture -n " + integrity.HeadNamespace + " -s head.sig < head.txt\n" +
		"An html page plays offline in any browser: it fetches nothing and carries the typescript and\n" +
		"timing files as they are (docs/EXAMINER.md, \"The web player\"). A page holds at most a\n" +
		"64 MiB typescript. Its query ?speed=N&autoplay=1 plays it at N times real time, ?t=SECONDS\n" +
		"opens it at that moment, ?find=TEXT where that text appeared.")
	e.Operands(0, 1)
	if err := e.Parse(args); err != nil {
		return failUsage("export", err)
	}
	switch *format {
	case "asciicast", "html", "head":
	default:
		return failUsage("export", e.SettingError("format", "%q: want asciicast, html or head", *format))
	}
	if *format != "html" {
		switch {
		case len(keys) > 0:
			return failUsage("export", e.SettingError("key", "only --format html shows a verdict"))
		case *runDir != "":
			return failUsage("export", e.SettingError("run-dir", "only --format html exports a whole run"))
		}
	}
	if *format == "head" && *input {
		return failUsage("export", e.SettingError("input", "only --format asciicast and html have input to add"))
	}
	if (*runDir == "") == (fs.NArg() == 0) {
		return failUsage("export", e.SettingError("run-dir", "give either one SESSION or --run-dir, not both and not neither"))
	}
	var session string
	if fs.NArg() == 1 {
		dirs, err := resolveSessions(root(), fs.Args(), *format == "html")
		if err != nil {
			fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture export: "+err.Error()))
			return exitFailure
		}
		session = dirs[0]
	}
	var err error
	switch *format {
	case "asciicast":
		err = exportAsciicast(session, *out, examine.CastOptions{Input: *input})
	case "html":
		opts := webplayer.Options{Input: *input}
		if len(keys) > 0 {
			trusted, kerr := loadTrustedKeys(keys)
			if kerr != nil {
				fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture export: "+kerr.Error()))
				return exitUsage
			}
			opts.Keys = &trusted
		}
		if *runDir != "" {
			if *out == "" {
				return failUsage("export", e.SettingError("out", "missing: --run-dir writes a folder of pages, index.html among them"))
			}
			err = exportRunPages(*runDir, *out, opts)
		} else {
			err = exportPage(session, *out, opts)
		}
	case "head":
		err = exportHead(session, *out)
	}
	if err != nil {
		// The error may carry names from the session folder: escaped.
		fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture export: "+err.Error()))
		return exitFailure
	}
	return exitOK
}

func exportAsciicast(dir, out string, opts examine.CastOptions) error {
	return writeNewOutput(out, func(w io.Writer) error { return examine.ExportAsciicast(dir, w, opts) })
}

func exportPage(dir, out string, opts webplayer.Options) error {
	return writeNewOutput(out, func(w io.Writer) error {
		_, err := webplayer.WritePage(w, dir, opts)
		return err
	})
}

// writeNewOutput runs write into the new file out (never one that exists:
// an export replaces nothing), or to stdout when out is "".
func writeNewOutput(out string, write func(io.Writer) error) (err error) {
	if out == "" {
		return write(os.Stdout)
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		// A failed export leaves no file behind: a partial page or cast
		// would be taken for the session, and the next try refused as
		// "file exists". The file is the one this call created.
		if err != nil {
			os.Remove(out)
		}
	}()
	return write(f)
}

// indexPage is the name of a run export's index.
const indexPage = "index.html"

// exportRunPages writes one page per session of runDir into the folder
// out (made if missing), each <session folder>.html, and index.html
// linking them. A session that cannot be read is in the index with why,
// and makes the export fail once every other page is written.
func exportRunPages(runDir, out string, opts webplayer.Options) error {
	dirs, skipped, err := examine.RunSessions(runDir)
	if err != nil {
		return err
	}
	for _, s := range skipped {
		fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture export: skipped "+s))
	}
	if len(dirs) == 0 {
		return fmt.Errorf("%s: no session folders", runDir)
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	entries := make([]webplayer.IndexEntry, 0, len(dirs))
	var failed int
	for _, dir := range dirs {
		// A session named "index" must not take the index's name. Its page
		// is index@session.html: "@" is in no session id, so no other
		// session's page can have that name.
		page := filepath.Base(dir) + ".html"
		if page == indexPage {
			page = "index@session.html"
		}
		var info webplayer.PageInfo
		err := writeNewOutput(filepath.Join(out, page), func(w io.Writer) error {
			var err error
			info, err = webplayer.WritePage(w, dir, opts)
			return err
		})
		entry := webplayer.IndexEntry{Page: page, Summary: info.Summary, Verdict: info.Verdict}
		if err != nil {
			failed++
			fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture export: "+err.Error()))
			entry.Page, entry.Error = "", err.Error()
			entry.Summary = examine.Summarize(dir, filepath.Base(runDir), filepath.Base(dir))
		}
		entries = append(entries, entry)
	}
	err = writeNewOutput(filepath.Join(out, indexPage), func(w io.Writer) error {
		return webplayer.WriteIndex(w, filepath.Base(runDir), opts.Keys != nil, entries)
	})
	if err == nil && failed > 0 {
		err = fmt.Errorf("%d of %d sessions have no page (named above and in %s)", failed, len(dirs), indexPage)
	}
	return err
}

func exportHead(dir, out string) error {
	msg, sig, err := evidence.LastHead(dir)
	if err != nil {
		return err
	}
	if out == "" {
		out = "."
	}
	cert, err := evidence.SignerCert(dir)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, headMessageFile), msg, 0o644); err != nil {
		return err
	}
	if cert != "" {
		// A session key's certificate, for ssh-keygen -L -f.
		if err := os.WriteFile(filepath.Join(out, headCertFile), []byte(cert+"\n"), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(out, headSigFile), []byte(sig), 0o644)
}
