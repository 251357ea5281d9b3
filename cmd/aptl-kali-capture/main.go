// Command aptl-kali-capture is the capture sidecar of an APTL lab: an SSH
// server that owns the PTY master of every session and records it.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
)

// Exit codes of the command itself.
const (
	exitOK = 0
	// exitFailure is a run that started and failed.
	exitFailure = 1
	// exitUsage is a usage error, the same for aptl-launch-agent.
	exitUsage = cliconfig.ExitUsage
	// exitPortTaken: serve found its SSH listen address held by another
	// process for longer than --port-taken-wait (cmd/aptl-kali-capture/listen.go).
	exitPortTaken = 4
)

// progName is the command's name in usage lines and messages.
const progName = "aptl-kali-capture"

// newEnvFlags returns the settings of a subcommand, read from the process's
// environment; its synopsis defaults to "aptl-kali-capture <name> [flags]".
func newEnvFlags(name string) *cliconfig.Flags {
	return cliconfig.New(progName+" "+name, os.LookupEnv, os.Stderr)
}

// failUsage reports a usage or setting error of subcommand name on stderr
// and returns its exit code (cliconfig.Fail: 0 after -h).
func failUsage(name string, err error) int {
	return cliconfig.Fail(os.Stderr, progName+" "+name, err)
}

type command struct {
	summary string
	run     func(args []string) int
	hidden  bool // started by the command itself, never typed: not in the usage
}

var commands = map[string]command{}

// register adds a subcommand; a duplicate name is a programming error.
func register(name string, c command) {
	if _, dup := commands[name]; dup {
		panic("aptl-kali-capture: duplicate subcommand " + name)
	}
	commands[name] = c
}

func main() {
	if err := prepareProcess(); err != nil {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture: %v\n", err)
		os.Exit(exitFailure)
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(exitUsage)
	}
	switch os.Args[1] {
	case "help":
		if len(os.Args) > 2 {
			os.Exit(runHelp(os.Args[2:]))
		}
		usageTo(os.Stdout)
		os.Exit(exitOK)
	case "-h", "-help", "--help":
		usageTo(os.Stdout)
		os.Exit(exitOK)
	case "--version", "-version":
		os.Exit(runVersion(nil))
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture: unknown subcommand %q\n", os.Args[1])
		usage()
		os.Exit(exitUsage)
	}
	os.Exit(c.run(os.Args[2:]))
}

func usage() { usageTo(os.Stderr) }

// runHelp is `help CMD`: the subcommand's own usage, as `CMD -h` prints
// it (synopsis, flags and their environment variables, on stdout).
func runHelp(args []string) int {
	c, ok := commands[args[0]]
	if !ok || len(args) > 1 {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture help: %q is not one subcommand; the subcommands are:\n", strings.Join(args, " "))
		usage()
		return exitUsage
	}
	return c.run([]string{"-h"})
}

// usageTo writes the command's usage: to stdout when asked for (-h,
// --help, help), to stderr after a usage error.
func usageTo(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	fmt.Fprintln(w, "usage: aptl-kali-capture <subcommand> [flags]\n       aptl-kali-capture help [<subcommand>] | --help | -h\n       aptl-kali-capture --version")
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "Run 'aptl-kali-capture <subcommand> -h' for its flags and environment variables.")
}
