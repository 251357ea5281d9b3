package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
	"github.com/aptl/aptl-kali-capture/internal/termsafe"
)

func init() {
	register("play", command{summary: "replay a session's output with its timing (--follow: one still being recorded)", run: runPlay})
}

// Bounds of play's settings.
const (
	minPlaySpeed = 0.01
	maxPlaySpeed = 1e6
)

func runPlay(args []string) int {
	e := newEnvFlags("play")
	fs := e.FlagSet
	speed := fs.String("speed", "1", "play this many times faster than recorded (0.01 to 1000000)")
	maxDelay := fs.Duration("max-delay", 0, "longest pause between two writes, as scriptreplay --maxdelay (0: as recorded)")
	input := fs.Bool("input", false, "also play the typed input (it holds every typed byte, unechoed passwords included)")
	follow := fs.Bool("follow", false, "keep playing a session that is still being recorded until its close record")
	root := rootFlag(e)
	e.SetSynopsis(progName + " play [--speed N] [--max-delay D] [--input] [--follow] [--root ROOT] " + sessionOperand)
	e.SetEpilogue(sessionOperandHelp + "\n" +
		"Writes the output stream to stdout as scriptreplay --stream out does (without its final newline).")
	e.Operands(1, 1)
	if err := e.Parse(args); err != nil {
		return failUsage("play", err)
	}
	opts := examine.PlayOptions{MaxDelay: *maxDelay, Input: *input, Follow: *follow}
	if err := checkPlaySettings(e, *speed, &opts); err != nil {
		return failUsage("play", err)
	}
	dirs, err := resolveSessions(root(), fs.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture play: "+err.Error()))
		return exitFailure
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := examine.Play(ctx, dirs[0], os.Stdout, opts); err != nil {
		if ctx.Err() != nil {
			return exitOK // interrupted, as a pager quits
		}
		fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture play: "+err.Error()))
		return exitFailure
	}
	return exitOK
}

// checkPlaySettings parses --speed and bounds it and --max-delay.
func checkPlaySettings(e *cliconfig.Flags, speed string, opts *examine.PlayOptions) error {
	s, err := strconv.ParseFloat(speed, 64)
	if err != nil {
		return e.SettingError("speed", "%q is not a number", speed)
	}
	if !(s >= minPlaySpeed && s <= maxPlaySpeed) {
		return e.SettingError("speed", "%v: must be between %v and %v", s, minPlaySpeed, maxPlaySpeed)
	}
	opts.Speed = s
	return cliconfig.CheckRange(e, "max-delay", opts.MaxDelay, 0, 24*time.Hour)
}
