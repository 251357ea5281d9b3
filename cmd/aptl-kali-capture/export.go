package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/termsafe"
)

func init() {
	register("export", command{summary: "export a session: asciicast for asciinema, or its signed head for ssh-keygen", run: runExport})
}

// Names of the files `export --format head` writes.
const (
	headMessageFile = "head.txt"
	headSigFile     = "head.sig"
)

func runExport(args []string) int {
	e := newEnvFlags("export")
	fs := e.FlagSet
	format := fs.String("format", "asciicast", "asciicast (to --out or stdout) or head (head.txt and head.sig into --out, default .)")
	out := fs.String("out", "", "output file (asciicast) or directory (head)")
	// Typed input stays out of a shareable copy unless asked for, as
	// `asciinema rec` records stdin only with --stdin (examine.CastOptions).
	input := fs.Bool("input", false, "asciicast: include the typed input as \"i\" events; it holds every typed byte, unechoed passwords included")
	root := rootFlag(e)
	e.SetSynopsis(progName + " export [--format asciicast|head] [--out PATH] [--input] [--root ROOT] " + sessionOperand)
	e.SetEpilogue(sessionOperandHelp + "\n\n" +
		"Check an exported head with stock OpenSSH:\n" +
		"  echo \"aptl-kali-capture $(cat ssh_host_ed25519_key.pub)\" > allowed_signers\n" +
		"  ssh-keygen -Y verify -f allowed_signers -I aptl-kali-capture -n " + integrity.HeadNamespace + " -s head.sig < head.txt")
	e.Operands(1, 1)
	if err := e.Parse(args); err != nil {
		return failUsage("export", err)
	}
	if *format != "asciicast" && *format != "head" {
		return failUsage("export", e.SettingError("format", "%q: want asciicast or head", *format))
	}
	if *format == "head" && *input {
		return failUsage("export", e.SettingError("input", "only --format asciicast has events to add input to"))
	}
	dirs, err := resolveSessions(root(), fs.Args())
	if err == nil && *format == "asciicast" {
		err = exportAsciicast(dirs[0], *out, examine.CastOptions{Input: *input})
	} else if err == nil {
		err = exportHead(dirs[0], *out)
	}
	if err != nil {
		// The error may carry names from the session folder: escaped.
		fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture export: "+err.Error()))
		return exitFailure
	}
	return exitOK
}

func exportAsciicast(dir, out string, opts examine.CastOptions) (err error) {
	var w io.Writer = os.Stdout
	if out != "" {
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}()
		w = f
	}
	return examine.ExportAsciicast(dir, w, opts)
}

func exportHead(dir, out string) error {
	msg, sig, err := evidence.LastHead(dir)
	if err != nil {
		return err
	}
	if out == "" {
		out = "."
	}
	if err := os.WriteFile(filepath.Join(out, headMessageFile), msg, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, headSigFile), []byte(sig), 0o644)
}
