package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
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
	maxPlayIdleLimit = 7 * 24 * time.Hour
	// defaultIdleLimit ends a --follow of a session that has recorded
	// nothing for half an hour: long enough for someone reading or
	// thinking at a shell, short enough that a session a crash left open
	// (it gets no close record until the sidecar restarts) does not hold
	// a follower for ever.
	defaultIdleLimit = 30 * time.Minute
)

// playKeys is what each key does while play runs on a terminal; the -h
// text and docs/RECORD.md say the same.
const playKeys = "Keys while playing on a terminal (stdin and stdout): space pause/resume, + faster (x2), - slower (/2), . one chunk while paused, q quit."

func runPlay(args []string) int {
	e := newEnvFlags("play")
	fs := e.FlagSet
	speed := fs.String("speed", "1", "play this many times faster than recorded (0.01 to 1000000)")
	maxDelay := fs.Duration("max-delay", 0, "longest pause between two writes, as scriptreplay --maxdelay (0: as recorded)")
	start := fs.Duration("start", 0, "start this far into the session (90s, 1m30s): what comes before is written at once, without its pauses")
	input := fs.Bool("input", false, "also play the typed input (it holds every typed byte, unechoed passwords included)")
	follow := fs.Bool("follow", false, "keep playing a session that is still being recorded until its close record")
	idle := fs.Duration("idle-limit", defaultIdleLimit, "with --follow: stop once the session has recorded nothing new for this long (0: no limit)")
	root := rootFlag(e)
	e.SetSynopsis(progName + " play [--speed N] [--max-delay D] [--start OFFSET] [--input] [--follow [--idle-limit D]] [--root ROOT] " + sessionOperand)
	e.SetEpilogue(sessionOperandHelp + "\n" +
		"Writes the output stream to stdout as scriptreplay --stream out does (without its final newline).\n" + playKeys)
	e.Operands(1, 1)
	if err := e.Parse(args); err != nil {
		return failUsage("play", err)
	}
	opts := examine.PlayOptions{MaxDelay: *maxDelay, Input: *input, Follow: *follow, Start: *start}
	if *follow {
		opts.IdleLimit = *idle
	}
	if err := checkPlaySettings(e, *speed, *idle, &opts); err != nil {
		return failUsage("play", err)
	}
	dirs, err := resolveSessions(root(), fs.Args(), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture play: "+err.Error()))
		return exitFailure
	}
	// SIGTERM and SIGHUP end the play as Ctrl-C does, so the deferred
	// restore of the terminal's mode runs whichever way it is stopped.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// Keys only when the play is on the terminal too: played into a pipe
	// (| less), the terminal's keys are the pager's.
	if isTerminal(os.Stdin) && isTerminal(os.Stdout) {
		if restore, err := keyMode(os.Stdin); err == nil {
			defer restore()
			keys := make(chan examine.PlayAction, 16)
			go readKeys(os.Stdin, keys)
			opts.Control = keys
		}
	}
	err = examine.Play(ctx, dirs[0], os.Stdout, opts)
	var idleErr *examine.IdleError
	switch {
	case errors.As(err, &idleErr):
		// The limit the examiner set (or its default) ended the follow:
		// said, and not a failure.
		fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture play: "+err.Error()+"; --idle-limit 0 follows it without a limit"))
	case err != nil && ctx.Err() != nil:
		// interrupted, as a pager quits
	case err != nil:
		fmt.Fprintln(os.Stderr, termsafe.Escape("aptl-kali-capture play: "+err.Error()))
		return exitFailure
	}
	return exitOK
}

// checkPlaySettings parses --speed and bounds it, --max-delay, --start and
// --idle-limit.
func checkPlaySettings(e *cliconfig.Flags, speed string, idle time.Duration, opts *examine.PlayOptions) error {
	s, err := strconv.ParseFloat(speed, 64)
	if err != nil {
		return e.SettingError("speed", "%q is not a number", speed)
	}
	if !(s >= examine.MinSpeed && s <= examine.MaxSpeed) {
		return e.SettingError("speed", "%v: must be between %v and %v", s, examine.MinSpeed, examine.MaxSpeed)
	}
	opts.Speed = s
	if opts.Start < 0 {
		return e.SettingError("start", "%v: an offset into the session cannot be negative", opts.Start)
	}
	if err := cliconfig.CheckRange(e, "idle-limit", idle, 0, maxPlayIdleLimit); err != nil {
		return err
	}
	return cliconfig.CheckRange(e, "max-delay", opts.MaxDelay, 0, 24*time.Hour)
}

// keyAction is what a key typed during a play asks for (playKeys).
func keyAction(b byte) (examine.PlayAction, bool) {
	switch b {
	case ' ':
		return examine.PlayPause, true
	case '+':
		return examine.PlayFaster, true
	case '-':
		return examine.PlaySlower, true
	case '.':
		return examine.PlayStep, true
	case 'q':
		return examine.PlayQuit, true
	}
	return 0, false
}

// readKeys sends the action of each key read from r, ignoring the others
// (an arrow key's escape sequence among them), until r ends. It does not
// close actions: a closed channel would read as an endless run of
// no-actions.
func readKeys(r io.Reader, actions chan<- examine.PlayAction) {
	buf := make([]byte, 64)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			if a, ok := keyAction(b); ok {
				actions <- a
			}
		}
		if err != nil {
			return
		}
	}
}
