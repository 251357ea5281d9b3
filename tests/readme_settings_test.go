package tests

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeSettingsTable: README.md's configuration table lists exactly
// the flags of serve (as `serve --check` prints them), each with the
// environment variable `serve -h` names for it.
func TestReadmeSettingsTable(t *testing.T) {
	bin := buildCommand(t)
	out, err := exec.Command(bin, "serve", "--check").Output()
	if err != nil {
		t.Fatalf("serve --check: %v", err)
	}
	var flags []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		flags = append(flags, strings.Fields(line)[0])
	}
	help, _ := exec.Command(bin, "serve", "-h").CombinedOutput()
	envOf := map[string]string{}
	envRE := regexp.MustCompile(`\(env (APTL_CAPTURE_\w+)\)`)
	for _, entry := range strings.Split(string(help), "\n  -")[1:] {
		name := strings.Fields(entry)[0]
		if m := envRE.FindStringSubmatch(entry); m != nil {
			envOf[name] = m[1]
		}
	}

	_, section := docSection(t, "../docs/OPERATING.md", "## Configuration")
	var rows []string
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `(\\w+)` \\|").FindAllStringSubmatch(section, -1) {
		rows = append(rows, m[1])
		if envOf[m[1]] != m[2] {
			t.Errorf("docs/OPERATING.md row --%s names %s; serve -h says %q", m[1], m[2], envOf[m[1]])
		}
	}
	slices.Sort(flags)
	slices.Sort(rows)
	if !slices.Equal(flags, rows) {
		t.Errorf("docs/OPERATING.md settings table lists %v\nserve has %v", rows, flags)
	}
}

// TestReadmeListsSubcommands: README.md's "Two commands" section names
// every subcommand `help` lists, and each has a synopsis that `<cmd> -h`
// prints: the README's sections for ls and play quote theirs.
func TestReadmeListsSubcommands(t *testing.T) {
	bin := buildCommand(t)
	_, section := docSection(t, "../README.md", "## Two commands")
	record, _ := docSection(t, "../docs/RECORD.md", "### Listing sessions: ls")
	for _, name := range subcommandsOf(t, bin) {
		if !strings.Contains(section, "`"+name+"`") {
			t.Errorf("README's Two commands section does not name `%s`", name)
		}
	}
	for _, name := range []string{"ls", "play"} {
		help, err := exec.Command(bin, name, "-h").Output()
		if err != nil {
			t.Fatalf("%s -h: %v", name, err)
		}
		synopsis, _, _ := strings.Cut(strings.TrimPrefix(string(help), "usage: "), "\n")
		if !strings.Contains(record, "\n"+synopsis+"\n") {
			t.Errorf("docs/RECORD.md does not quote %s's synopsis %q", name, synopsis)
		}
	}
}

// docSection returns the document at path and its section that starts
// with the heading line, up to the next "## " heading.
func docSection(t *testing.T, path, heading string) (doc, section string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc = string(b)
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s has no %q section", path, heading)
	}
	section = doc[i+1:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	return doc, section
}
