package cliconfig

import (
	"io"
	"log/slog"

	"github.com/aptl/aptl-kali-capture/internal/termsafe"
)

// Logging is the --log-format and --log-level pair both commands have.
type Logging struct {
	format, level string
	flags         *Flags
}

// LoggingFlags defines --log-format and --log-level with the environment
// variables envPrefix+"LOG_FORMAT" and envPrefix+"LOG_LEVEL".
func (e *Flags) LoggingFlags(envPrefix, defaultFormat string) *Logging {
	l := &Logging{flags: e}
	e.String(&l.format, "log-format", envPrefix+"LOG_FORMAT", defaultFormat, "log format: text or json")
	e.String(&l.level, "log-level", envPrefix+"LOG_LEVEL", "info", "debug, info, warn or error")
	return l
}

// Check reports a format or level that is not one of the known ones.
func (l *Logging) Check() error {
	if l.format != "text" && l.format != "json" {
		return l.flags.SettingError("log-format", "%q is neither text nor json", l.format)
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.level)); err != nil {
		return l.flags.SettingError("log-level", "%q is not debug, info, warn or error", l.level)
	}
	return nil
}

// Format is the checked log format.
func (l *Logging) Format() string { return l.format }

// Level is the checked log level (info if Check was not called or failed).
func (l *Logging) Level() slog.Level {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(l.level))
	return lv
}

// NewLogger returns a logger writing to w in format ("text" or "json") at
// level: the one place both commands build theirs. The text handler quotes
// every control character; JSON leaves DEL, C1 and bidi controls raw, so
// its output goes through termsafe.JSONWriter, which escapes them (a path
// in a log line must not steer the terminal that shows the log).
func NewLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(termsafe.NewJSONWriter(w), opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
