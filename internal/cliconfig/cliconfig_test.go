package cliconfig

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

func newTestFlags(help *bytes.Buffer) *Flags {
	e := New("tool sub", testutil.MapLookup(nil), &bytes.Buffer{})
	e.SetHelpOutput(help)
	var n int
	e.Int(&n, "count", "TOOL_COUNT", 1, "how many")
	e.SetSynopsis("tool sub [--count N] DIR")
	e.Operands(1, 1)
	return e
}

// TestHelpPrintsSynopsisAndFlags: -h writes "usage: <synopsis>" and every
// flag to the help output and returns flag.ErrHelp, which Fail turns into
// exit 0 without printing anything more.
func TestHelpPrintsSynopsisAndFlags(t *testing.T) {
	var help, stderr bytes.Buffer
	err := newTestFlags(&help).Parse([]string{"-h"})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	if !strings.HasPrefix(help.String(), "usage: tool sub [--count N] DIR\nflags:\n") || !strings.Contains(help.String(), "(env TOOL_COUNT)") {
		t.Errorf("help = %q", help.String())
	}
	if code := Fail(&stderr, "tool sub", err); code != 0 || stderr.Len() != 0 {
		t.Errorf("Fail after -h: exit %d, stderr %q; want 0 and nothing", code, stderr.String())
	}
}

// TestUsageErrorIsShort: an unknown flag, a missing or a stray operand is
// one error line, the synopsis and a pointer to -h: not the flag list.
func TestUsageErrorIsShort(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown flag":    {"--nope", "d"},
		"missing value":   {"d", "--count"},
		"missing operand": {},
		"stray operand":   {"d", "e"},
	} {
		t.Run(name, func(t *testing.T) {
			var help, stderr bytes.Buffer
			err := newTestFlags(&help).Parse(args)
			var u *UsageError
			if !errors.As(err, &u) {
				t.Fatalf("err = %v, want a *UsageError", err)
			}
			code := Fail(&stderr, "tool sub", err)
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if code != ExitUsage || len(lines) != 3 || !strings.HasPrefix(lines[0], "tool sub: ") ||
				lines[1] != "usage: tool sub [--count N] DIR" || lines[2] != "Run 'tool sub -h' for every flag." {
				t.Errorf("exit %d, stderr %q", code, stderr.String())
			}
			if help.Len() != 0 {
				t.Errorf("help output %q after a usage error", help.String())
			}
		})
	}
}

// TestSettingErrorShowsTheSynopsis: a refused value is the line naming
// both spellings, then the synopsis and the -h pointer, as for a flag
// that does not parse.
func TestSettingErrorShowsTheSynopsis(t *testing.T) {
	e := newTestFlags(&bytes.Buffer{})
	if err := e.Parse([]string{"d"}); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := Fail(&stderr, "tool sub", CheckRange(e, "count", 0, 1, 1000))
	want := "tool sub: --count / TOOL_COUNT: 0: must be between 1 and 1000\n" +
		"usage: tool sub [--count N] DIR\nRun 'tool sub -h' for every flag.\n"
	if code != ExitUsage || stderr.String() != want {
		t.Errorf("exit %d, stderr %q, want %q", code, stderr.String(), want)
	}
}

// TestEnvironmentErrorShowsTheSynopsis: an environment value that does not
// parse is a usage error too.
func TestEnvironmentErrorShowsTheSynopsis(t *testing.T) {
	e := New("tool sub", func(name string) (string, bool) { return "many", name == "TOOL_COUNT" }, &bytes.Buffer{})
	var n int
	e.Int(&n, "count", "TOOL_COUNT", 1, "how many")
	e.SetSynopsis("tool sub [--count N]")
	var stderr bytes.Buffer
	code := Fail(&stderr, "tool sub", e.Parse(nil))
	want := "tool sub: TOOL_COUNT: \"many\" is not a whole number\n" +
		"usage: tool sub [--count N]\nRun 'tool sub -h' for every flag.\n"
	if code != ExitUsage || stderr.String() != want {
		t.Errorf("exit %d, stderr %q, want %q", code, stderr.String(), want)
	}
}

func TestCheckRange(t *testing.T) {
	e := newTestFlags(&bytes.Buffer{})
	if err := CheckRange(e, "count", 5, 1, 5); err != nil {
		t.Errorf("5 in [1,5]: %v", err)
	}
	if err := CheckRange(e, "count", 2*time.Hour, 0, time.Hour); err == nil || !strings.HasSuffix(err.Error(), "2h0m0s: must be between 0s and 1h0m0s") {
		t.Errorf("err = %v", err)
	}
}
