package tests

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// readmeLimit is the README's budget: a landing page a newcomer reads in
// minutes; the reference lives in docs/.
const readmeLimit = 15 << 10

// TestReadmeLandingPage holds README.md to what a newcomer needs first:
// at most 15 KB, a table of contents naming every section, and the two
// commands (run the server, run the tests) as its first two code blocks,
// the test command being exactly the one .ci/run ends with.
func TestReadmeLandingPage(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	if len(data) > readmeLimit {
		t.Errorf("README.md is %d bytes, over its %d: move reference text to docs/", len(data), readmeLimit)
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme, 2)
	if len(blocks) < 2 || strings.TrimSpace(blocks[0][1]) != "go run ./cmd/aptl-kali-capture serve" {
		t.Fatalf("README's first code block is not the server's command: %q", blocks)
	}
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	ciLines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	if got, want := strings.TrimSpace(blocks[1][1]), ciLines[len(ciLines)-1]; got != want {
		t.Errorf("README's second code block is %q; .ci/run ends with %q", got, want)
	}
	_, toc := docSection(t, "../README.md", "## Contents")
	for _, m := range regexp.MustCompile(`(?m)^## (.+)$`).FindAllStringSubmatch(readme, -1) {
		if m[1] != "Contents" && !strings.Contains(toc, "["+m[1]+"](#") {
			t.Errorf("the table of contents does not link the section %q", m[1])
		}
	}
}

// TestReadmeCommandsParse: every aptl-kali-capture command the README
// shows, in a code block or inline, names a subcommand that exists, and
// every flag it gives is one that subcommand's -h lists. A renamed flag
// or subcommand fails here before a newcomer's paste fails.
func TestReadmeCommandsParse(t *testing.T) {
	bin := buildCommand(t)
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	subs := map[string]bool{"help": true}
	for _, n := range subcommandsOf(t, bin) {
		subs[n] = true
	}
	helpOf := map[string]string{}
	checked := 0
	for _, cmd := range readmeCommands(string(data)) {
		fields := strings.Fields(cmd)
		sub := fields[0]
		if strings.HasPrefix(sub, "-") { // aptl-kali-capture --version, -h
			if sub != "--version" && sub != "-h" && sub != "--help" {
				t.Errorf("README shows `aptl-kali-capture %s`, which the command does not take", cmd)
			}
			continue
		}
		if !subs[sub] {
			t.Errorf("README shows `aptl-kali-capture %s`: no subcommand %q", cmd, sub)
			continue
		}
		if _, ok := helpOf[sub]; !ok {
			out, err := exec.Command(bin, sub, "-h").Output()
			if err != nil && sub != "help" {
				t.Fatalf("%s -h: %v", sub, err)
			}
			helpOf[sub] = string(out)
		}
		for _, f := range fields[1:] {
			if !strings.HasPrefix(f, "-") || f == "-" {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
			if name == "h" || name == "help" {
				continue
			}
			if !strings.Contains(helpOf[sub], "\n  -"+name+" ") && !strings.Contains(helpOf[sub], "\n  -"+name+"\n") {
				t.Errorf("README shows `aptl-kali-capture %s`: %s -h lists no flag -%s", cmd, sub, name)
			}
		}
		checked++
	}
	if checked < 5 {
		t.Errorf("found only %d aptl-kali-capture commands in README.md; the scan is broken", checked)
	}
}

// readmeCommands returns the arguments of each aptl-kali-capture command
// the README shows: in ```sh blocks (after a line start, a space or a
// slash, as in ./cmd/aptl-kali-capture; not a container name like
// aptl-kali-capture:/path), and in inline code spans that are commands.
// Output shown in plain ``` blocks is no command and is left alone.
func readmeCommands(readme string) []string {
	var cmds []string
	add := func(rest string) {
		rest = strings.TrimSpace(rest)
		// docker exec aptl-kali-capture aptl-kali-capture hostkey: the
		// container, then the command.
		rest = strings.TrimSpace(strings.TrimPrefix(rest, "aptl-kali-capture "))
		rest, _, _ = strings.Cut(rest, " |")
		rest, _, _ = strings.Cut(rest, " #")
		rest, _, _ = strings.Cut(rest, " >")
		if regexp.MustCompile(`^-{0,2}[a-z]`).MatchString(rest) {
			cmds = append(cmds, rest)
		}
	}
	inBlock := regexp.MustCompile("(?:^|[\\s/])aptl-kali-capture ([^\n]*)")
	for _, b := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme, -1) {
		// A command continued over lines with a trailing backslash is one.
		for _, line := range strings.Split(strings.ReplaceAll(b[1], "\\\n", " "), "\n") {
			for _, m := range inBlock.FindAllStringSubmatch(line, -1) {
				add(m[1])
			}
		}
	}
	prose := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(readme, "")
	for _, m := range regexp.MustCompile("`(?:\\./|docker exec \\S+ )?aptl-kali-capture ([^`]*)`").FindAllStringSubmatch(prose, -1) {
		add(m[1])
	}
	return cmds
}
