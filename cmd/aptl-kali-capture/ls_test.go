package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/examine"
)

// TestLsFilters: each filter keeps what it names and drops the rest;
// --since is inclusive, --until exclusive, a date --until keeps its whole
// day, a duration counts back from now; a broken session, which has no
// open record, is dropped by the record's filters; a verdict needs
// --verify; every refusal names the flag and the value.
func TestLsFilters(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	at := func(s string) *time.Time {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			panic(err)
		}
		return &t
	}
	rows := []examine.Summary{
		{Session: "early", User: "kali", State: examine.StateFinalized, Start: at("2026-12-03T23:59:59Z")},
		{Session: "midnight", User: "kali", State: examine.StateFinalized, Start: at("2026-12-04T00:00:00Z")},
		{Session: "morning", User: "root", State: examine.StateInProgress, Start: at("2026-12-04T11:00:00Z")},
		{Session: "next-day", User: "kali", State: examine.StateUnfinalized, Start: at("2026-12-05T00:00:00Z")},
		{Session: "broken", State: examine.StateBroken},
	}
	keep := func(user, since, until, status string) string {
		t.Helper()
		f, err := parseLsFilter(newEnvFlags("ls"), user, since, until, status, false, now)
		if err != nil {
			t.Fatalf("filter %q %q %q %q: %v", user, since, until, status, err)
		}
		var kept []string
		for _, r := range rows {
			if f.keepSummary(r) {
				kept = append(kept, r.Session)
			}
		}
		return strings.Join(kept, ",")
	}
	for _, tt := range []struct{ user, since, until, status, want string }{
		{"", "", "", "", "early,midnight,morning,next-day,broken"},
		{"kali", "", "", "", "early,midnight,next-day"},
		{"", "2026-12-04", "", "", "midnight,morning,next-day"},
		{"", "", "2026-12-04", "", "early,midnight,morning"},
		{"", "2026-12-04", "2026-12-04", "", "midnight,morning"},
		{"", "", "2026-12-04T00:00:00Z", "", "early"},
		{"", "2026-12-04T01:00:00+01:00", "", "", "midnight,morning,next-day"},
		{"", "2h", "", "", "morning,next-day"},
		{"", "", "", "broken", "broken"},
		{"", "", "", "in-progress, unfinalized", "morning,next-day"},
		{"kali", "", "", "finalized", "early,midnight"},
	} {
		if got := keep(tt.user, tt.since, tt.until, tt.status); got != tt.want {
			t.Errorf("--user %q --since %q --until %q --status %q kept %q, want %q", tt.user, tt.since, tt.until, tt.status, got, tt.want)
		}
	}

	for _, tt := range []struct{ since, until, status, want string }{
		{"yesterday", "", "", `--since: "yesterday": want RFC 3339`},
		{"", "2026-13-01", "", `--until: "2026-13-01"`},
		{"-2h", "", "", `--since: "-2h": a duration ago must be positive`},
		{"2026-12-05", "2026-12-04", "", `--until: "2026-12-04" is not after --since`},
		{"", "", "done", `--status: "done" is not a state (in-progress, finalized`},
		{"", "", "ok", `--status: "ok" is a verdict: it needs --verify`},
	} {
		_, err := parseLsFilter(newEnvFlags("ls"), "", tt.since, tt.until, tt.status, false, now)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("--since %q --until %q --status %q: %v, want %q", tt.since, tt.until, tt.status, err, tt.want)
		}
	}

	f, err := parseLsFilter(newEnvFlags("ls"), "", "", "", "fail", true, now)
	if err != nil {
		t.Fatal(err)
	}
	if f.keepVerdict(&lsVerdict{OK: true}) || !f.keepVerdict(&lsVerdict{Anomalies: 2}) {
		t.Error("--status fail --verify: keeps an ok session or drops a failed one")
	}
}

// TestLsCommandColumn: the COMMAND cell is the exec command, escaped and
// cut as every cell, "shell" for a shell session and "-" for a broken one.
func TestLsCommandColumn(t *testing.T) {
	start := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)
	hostile := "printf '\x1b[2J\x1b[H'\t" + strings.Repeat("x", 100)
	rows := []lsRow{
		{Summary: examine.Summary{Run: "r", Session: "exec-1", Command: &hostile, Start: &start, State: examine.StateFinalized}},
		{Summary: examine.Summary{Run: "r", Session: "shell-1", Start: &start, State: examine.StateFinalized}},
		{Summary: examine.Summary{Run: "r", Session: "gone", State: examine.StateBroken, Error: "no open record"}},
	}
	var b bytes.Buffer
	printSessionTable(&b, rows, false)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s", b.String())
	}
	col := strings.Index(lines[0], "COMMAND")
	if col < 0 {
		t.Fatalf("no COMMAND column: %q", lines[0])
	}
	cellAt := func(line string) string { return strings.Fields(string([]rune(line)[col:]))[0] }
	want := []string{`printf`, "shell", "-"}
	for i, line := range lines[1:] {
		if strings.ContainsAny(line, "\x1b\t") {
			t.Errorf("control character in %q", line)
		}
		if got := cellAt(line); got != want[i] {
			t.Errorf("row %d: COMMAND %q, want %q:\n%s", i, got, want[i], b.String())
		}
	}
	if !strings.Contains(lines[1], `printf '\x1b[2J\x1b[H'\t`) || !strings.Contains(lines[1], "x…") || strings.Contains(lines[1], strings.Repeat("x", 60)) {
		t.Errorf("the command is not shown escaped and cut at %d characters: %q", maxCell, lines[1])
	}
}
