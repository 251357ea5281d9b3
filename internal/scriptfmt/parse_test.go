package scriptfmt

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/scriptfmt/scriptfmttest"
)

// validTiming is a timing file as the recorder writes it: three lines.
const validTiming = "H 0.000000 START_TIME 2026-01-02 03:04:05+00:00\n" +
	"O 0.000000 5\n" +
	"S 0.250000 SIGWINCH ROWS=24 COLS=80\n"

// TestScanAcceptsWhatTheWriterWrites checks the valid file parses, so the
// refusals below are about the appended line.
func TestScanAcceptsWhatTheWriterWrites(t *testing.T) {
	var got []Entry
	if err := Scan(strings.NewReader(validTiming), "timing", func(e Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Kind: 'H', Name: "START_TIME", Value: "2026-01-02 03:04:05+00:00"},
		{Kind: 'O', N: 5},
		{Kind: 'S', Delay: 250 * time.Millisecond, Name: "SIGWINCH", Rows: 24, Cols: 80},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestScanRejectsUnwrittenLines feeds every line the writer never writes
// (signs, NaN, exponents, tabs, extra fields, a bare SIGWINCH, bad sizes,
// a valueless "H 0 NAME", an empty line, no newline at the end of the
// file, ...) and wants each refused with the file and its line number.
func TestScanRejectsUnwrittenLines(t *testing.T) {
	for _, tail := range scriptfmttest.RejectedLines(t) {
		t.Run(strconv.Quote(tail), func(t *testing.T) {
			err := Scan(strings.NewReader(validTiming+tail), "pty/timing", func(Entry) error { return nil })
			var le *LineError
			if !errors.As(err, &le) || !errors.Is(err, ErrTimingLine) {
				t.Fatalf("err = %v, want a LineError wrapping ErrTimingLine", err)
			}
			if le.Line != 4 || le.Off != int64(len(validTiming)) || !strings.HasPrefix(err.Error(), "pty/timing:4: ") {
				t.Errorf("err = %v (line %d, offset %d), want pty/timing line 4 at offset %d", err, le.Line, le.Off, len(validTiming))
			}
		})
	}
}

// TestScanLineTooLong: a line past MaxLine is refused, not split.
func TestScanLineTooLong(t *testing.T) {
	long := "H 0.000000 X " + strings.Repeat("v", MaxLine) + "\n"
	err := Scan(strings.NewReader(long), "timing", func(Entry) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "timing:1: ") || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("err = %v, want line 1 refused as too long", err)
	}
}

// FuzzTiming writes entries with the writer and parses them back with
// Scan: every written line must parse, to the values written.
func FuzzTiming(f *testing.F) {
	f.Add(int64(0), int64(0), uint16(0), uint16(0), "APTL_RUN_ID", "run-1")
	f.Add(int64(1234567), int64(4096), uint16(24), uint16(80), "COMMAND", "echo \"hi\"\n\x1b[2J\\x")
	f.Add(int64(-5), int64(1)<<40, uint16(65535), uint16(1), "N", "\xff\uFFFD\u202e \t")
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), uint16(10000), uint16(10000), "X", strings.Repeat("\x00", MaxHeaderValue))
	f.Fuzz(func(t *testing.T, delayUS, n int64, rows, cols uint16, name, value string) {
		delay := time.Duration(delayUS%(MaxDelaySeconds*1e6+1)) * time.Microsecond
		if delay < 0 {
			delay = 0 // the writer prints a negative delay as zero
		}
		n = max(n%(MaxEntryBytes+1), 0)
		if !ValidHeaderName(name) {
			name = "APTL_FUZZ"
		}
		var b []byte
		b = AppendHeaders(b, []Header{{Name: name, Value: value}})
		b = AppendTiming(b, 'I', delay, int(n))
		b = AppendResize(b, delay, int(rows), int(cols))
		var got []Entry
		if err := Scan(bytes.NewReader(b), "timing", func(e Entry) error { got = append(got, e); return nil }); err != nil {
			t.Fatalf("the parser refuses what the writer wrote: %v\n%q", err, b)
		}
		if len(got) != 3 {
			t.Fatalf("%d entries, want 3", len(got))
		}
		h, d, s := got[0], got[1], got[2]
		if h.Kind != 'H' || h.Name != name || h.Delay != 0 {
			t.Errorf("header %+v, want H %s", h, name)
		}
		if v := UnescapeHeaderValue(h.Value); v != value && !strings.HasSuffix(h.Value, TruncMark) {
			t.Errorf("header value %q reads back as %q", value, v)
		}
		if d.Kind != 'I' || d.N != n || d.Delay != delay {
			t.Errorf("data %+v, want I %v %d", d, delay, n)
		}
		if s.Kind != 'S' || s.Name != "SIGWINCH" || s.Rows != int(rows) || s.Cols != int(cols) || s.Delay != delay {
			t.Errorf("resize %+v, want %v %dx%d", s, delay, rows, cols)
		}
	})
}
