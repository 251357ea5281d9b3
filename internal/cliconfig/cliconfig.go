// Package cliconfig is the one settings mechanism of both commands
// (aptl-kali-capture and aptl-launch-agent): every setting is a flag with an
// environment equivalent, the environment supplies the default and the
// flag overrides it, and every error names both spellings of the setting.
// The environment is read through a lookup function, so tests pass a map
// instead of changing the process's environment.
package cliconfig

import (
	"errors"
	"flag"
	"fmt"
	"io"
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

// MapLookup looks names up in m, for tests.
func MapLookup(m map[string]string) Lookup {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// Flags binds flags to environment variables on one FlagSet and collects
// the errors of environment values that do not parse.
type Flags struct {
	FlagSet *flag.FlagSet
	lookup  Lookup
	errs    []error
	// envOf maps a flag name to its environment variable, for messages.
	envOf map[string]string
}

// New returns a FlagSet named name that reads the environment through
// lookup and writes usage and flag errors to output.
func New(name string, lookup Lookup, output io.Writer) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(output)
	return &Flags{FlagSet: fs, lookup: lookup, envOf: map[string]string{}}
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

// Parse parses args and returns the flag error, or every environment error
// joined, or an error for a stray argument.
func (e *Flags) Parse(args []string) error {
	if err := e.FlagSet.Parse(args); err != nil {
		return err
	}
	if len(e.errs) > 0 {
		return errors.Join(e.errs...)
	}
	if e.FlagSet.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", e.FlagSet.Arg(0))
	}
	return nil
}

// SettingError names the flag and its environment variable.
func (e *Flags) SettingError(name string, format string, args ...any) error {
	return fmt.Errorf("--%s / %s: %s", name, e.envOf[name], fmt.Sprintf(format, args...))
}
