package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/integrity"
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
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	format := fs.String("format", "asciicast", "asciicast (to --out or stdout) or head (head.txt and head.sig into --out, default .)")
	out := fs.String("out", "", "output file (asciicast) or directory (head)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: aptl-kali-capture export [--format asciicast|head] [--out PATH] SESSION_DIR")
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\nCheck an exported head with stock OpenSSH:\n"+
			"  echo \"aptl-kali-capture $(cat ssh_host_ed25519_key.pub)\" > allowed_signers\n"+
			"  ssh-keygen -Y verify -f allowed_signers -I aptl-kali-capture -n "+integrity.HeadNamespace+" -s head.sig < head.txt")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	var err error
	switch *format {
	case "asciicast":
		err = exportAsciicast(fs.Arg(0), *out)
	case "head":
		err = exportHead(fs.Arg(0), *out)
	default:
		fmt.Fprintf(os.Stderr, "aptl-kali-capture export: --format %q: want asciicast or head\n", *format)
		return exitUsage
	}
	if err != nil {
		// The error may carry names from the session folder: escaped.
		fmt.Fprintln(os.Stderr, examine.Escape("aptl-kali-capture export: "+err.Error()))
		return exitFailure
	}
	return exitOK
}

func exportAsciicast(dir, out string) (err error) {
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
	return examine.ExportAsciicast(dir, w)
}

func exportHead(dir, out string) error {
	msg, sig, err := examine.LastHead(dir)
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
