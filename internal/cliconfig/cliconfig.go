// Package cliconfig is the one settings mechanism of both commands
// (aptl-kali-capture and aptl-launch-agent): every setting is a flag with an
// environment equivalent, the environment supplies the default and the
// flag overrides it, and every error names both spellings of the setting.
// The environment is read through a lookup function, so tests pass a map
// instead of changing the process's environment.
//
// It also owns the usage conventions of every command and subcommand: -h
// prints "usage: <synopsis>" and every flag to stdout and exits 0; a flag
// or argument that does not parse, and a setting's value the command
// refuses, prints the one-line error, the synopsis and a pointer to -h
// (not the whole flag list) and exits ExitUsage.
package cliconfig

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// ExitUsage is the exit code of both commands for a usage error (a bad
// flag, environment value or setting), as Go's flag package exits on one.
const ExitUsage = 2

// Lookup returns an environment variable's value and whether it is set;
// os.LookupEnv is one.
type Lookup func(name string) (string, bool)

// Flags binds flags to environment variables on one FlagSet and collects
// the errors of environment values that do not parse.
type Flags struct {
	FlagSet *flag.FlagSet
	lookup  Lookup
	errs    []error
	// envOf maps a flag name to its environment variable, for messages.
	envOf map[string]string
	// synopsis is the usage line after "usage: " (SetSynopsis).
	synopsis string
	// epilogue follows the flags in -h (SetEpilogue).
	epilogue string
	// minArgs and maxArgs bound the operands after the flags (Operands).
	minArgs, maxArgs int
	// help receives -h's output: os.Stdout unless SetHelpOutput.
	help io.Writer
}

// New returns the settings of the command name, as typed
// ("aptl-kali-capture serve"), reading the environment through lookup.
// output receives the flag list when PrintDefaults is called on the
// FlagSet; usage errors are returned to the caller, who reports them with
// Fail.
func New(name string, lookup Lookup, output io.Writer) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(output)
	return &Flags{FlagSet: fs, lookup: lookup, envOf: map[string]string{}, synopsis: name + " [flags]", help: os.Stdout}
}

// SetSynopsis sets the usage line printed after "usage: ": the command as
// typed, then its flags and operands, e.g.
// "aptl-kali-capture export [flags] SESSION".
func (e *Flags) SetSynopsis(line string) { e.synopsis = line }

// SetEpilogue sets text printed by -h after the flags (an example).
func (e *Flags) SetEpilogue(text string) { e.epilogue = text }

// SetHelpOutput sends -h's output to w instead of stdout (tests).
func (e *Flags) SetHelpOutput(w io.Writer) { e.help = w }

// Operands allows from min to max arguments after the flags (max < 0: no
// upper bound); without this call Parse refuses any.
func (e *Flags) Operands(min, max int) { e.minArgs, e.maxArgs = min, max }

// UsageError is a command line that does not parse: an unknown flag, a
// flag without its value, a missing or stray operand. Fail follows its
// message with the short usage.
type UsageError struct {
	Err error
	// Synopsis is the command's usage line; Command the command as typed.
	Synopsis, Command string
}

func (u *UsageError) Error() string { return u.Err.Error() }
func (u *UsageError) Unwrap() error { return u.Err }

// PrintHelp writes the full usage to w: the synopsis, every flag with
// its environment variable and default, and the epilogue.
func (e *Flags) PrintHelp(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n", e.synopsis)
	has := false
	e.FlagSet.VisitAll(func(*flag.Flag) { has = true })
	if has {
		fmt.Fprintln(w, "flags:")
		out := e.FlagSet.Output()
		e.FlagSet.SetOutput(w)
		e.FlagSet.PrintDefaults()
		e.FlagSet.SetOutput(out)
	}
	if e.epilogue != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(e.epilogue, "\n"))
	}
}

// Fail reports err, the error of a command's Parse or of one of its
// settings, on w and returns the exit code: exit 0 after -h (Parse has
// printed the help), ExitUsage otherwise. The message is
// "<command>: <err>"; a UsageError is followed by the synopsis and a
// pointer to -h, as OpenSSH's tools print a short usage, not the whole
// flag list.
func Fail(w io.Writer, command string, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(w, "%s: %v\n", command, err)
	var u *UsageError
	if errors.As(err, &u) {
		fmt.Fprintf(w, "usage: %s\nRun '%s -h' for every flag.\n", u.Synopsis, u.Command)
	}
	return ExitUsage
}

func (e *Flags) get(name, env string) (string, bool) {
	e.envOf[name] = env
	return e.lookup(env)
}

func usage(env, text string) string { return text + " (env " + env + ")" }

// String defines a string setting.
func (e *Flags) String(p *string, name, env, def, text string) {
	if v, ok := e.get(name, env); ok {
		def = v
	}
	e.FlagSet.StringVar(p, name, def, usage(env, text))
}

// Int defines a whole-number setting.
func (e *Flags) Int(p *int, name, env string, def int, text string) {
	if v, ok := e.get(name, env); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s: %q is not a whole number", env, v))
		} else {
			def = n
		}
	}
	e.FlagSet.IntVar(p, name, def, usage(env, text))
}

// Bool defines a setting that is false unless set.
func (e *Flags) Bool(p *bool, name, env, text string) {
	def := false
	if v, ok := e.get(name, env); ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s: %q is not true or false", env, v))
		}
		def = b
	}
	e.FlagSet.BoolVar(p, name, def, usage(env, text))
}

// Duration defines a duration setting (30s, 5m).
func (e *Flags) Duration(p *time.Duration, name, env string, def time.Duration, text string) {
	if v, ok := e.get(name, env); ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s: %q is not a duration like 30s", env, v))
		} else {
			def = d
		}
	}
	e.FlagSet.DurationVar(p, name, def, usage(env, text))
}

// Parse parses args. After -h it prints the help (PrintHelp, to stdout)
// and returns flag.ErrHelp. It returns a *UsageError for a flag that does
// not parse or a wrong number of operands (Operands), or every
// environment error joined. The flag package's own printing is silenced:
// Fail reports the error once.
func (e *Flags) Parse(args []string) error {
	out := e.FlagSet.Output()
	e.FlagSet.SetOutput(io.Discard)
	e.FlagSet.Usage = func() {}
	err := e.FlagSet.Parse(args)
	e.FlagSet.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		e.PrintHelp(e.help)
		return err
	case err != nil:
		return e.usageError(err)
	}
	if len(e.errs) > 0 {
		return e.usageError(errors.Join(e.errs...))
	}
	switch n := e.FlagSet.NArg(); {
	case n < e.minArgs:
		return e.usageError(errors.New("missing operand"))
	case e.maxArgs >= 0 && n > e.maxArgs:
		return e.usageError(fmt.Errorf("unexpected argument %q", e.FlagSet.Arg(e.maxArgs)))
	}
	return nil
}

func (e *Flags) usageError(err error) error {
	return &UsageError{Err: err, Synopsis: e.synopsis, Command: e.FlagSet.Name()}
}

// SettingError is a setting's value that the command refuses, naming the
// flag and its environment variable. It is a UsageError, so Fail follows
// it with the synopsis and the -h pointer as it does an unknown flag:
// whoever typed `--speed abc` is shown how the command is called.
func (e *Flags) SettingError(name string, format string, args ...any) error {
	if env := e.envOf[name]; env != "" {
		return e.usageError(fmt.Errorf("--%s / %s: %s", name, env, fmt.Sprintf(format, args...)))
	}
	return e.usageError(fmt.Errorf("--%s: %s", name, fmt.Sprintf(format, args...)))
}

// CheckRange returns nil when v of the setting name is from lo to hi, and
// otherwise an error that gives the value and the range:
// "--pcap-files / APTL_CAPTURE_PCAP_FILES: 0: must be between 1 and 100000".
func CheckRange[T int | int64 | time.Duration](e *Flags, name string, v, lo, hi T) error {
	if v < lo || v > hi {
		return e.SettingError(name, "%v: must be between %v and %v", v, lo, hi)
	}
	return nil
}
