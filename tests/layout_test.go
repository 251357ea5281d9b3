package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The house's layout, held to docs/ARCHITECTURE.md: the floors run one way
// (internal/ is the ground floor; the writer never links the examiner's
// tools), every package has its row in the package table and every row is
// a package, and the import graph printed there is the one `go list`
// reports. APTL_UPDATE_ARCHITECTURE=1 rewrites the graph instead of
// comparing it, after a move.

const (
	module           = "github.com/aptl/aptl-kali-capture"
	architectureFile = "../docs/ARCHITECTURE.md"
	graphBegin       = "<!-- import graph: written by tests/layout_test.go from go list (GOOS=linux); APTL_UPDATE_ARCHITECTURE=1 rewrites it -->"
	graphEnd         = "<!-- end of the import graph -->"
)

// listedPackage is what the test reads of `go list -json`.
type listedPackage struct {
	ImportPath string
	Imports    []string
	GoFiles    []string
}

// projectPackages lists the module's packages for linux, with their
// imports of the project only, short names (no module prefix).
func projectPackages(t *testing.T) []listedPackage {
	t.Helper()
	cmd := exec.Command(goTool(t), "list", "-json", "./...")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		p.ImportPath = short(p.ImportPath)
		var own []string
		for _, imp := range p.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				own = append(own, short(imp))
			}
		}
		p.Imports = own
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	return pkgs
}

func short(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

// deps is every project package p links, p included.
func deps(pkgs []listedPackage, p string) map[string]bool {
	by := map[string]listedPackage{}
	for _, q := range pkgs {
		by[q.ImportPath] = q
	}
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		for _, imp := range by[p].Imports {
			walk(imp)
		}
	}
	walk(p)
	return seen
}

// TestFloorsRunOneWay: no package under internal/ imports one outside it,
// and the recorder (so the sidecar's writer) links the verifier, never the
// examiner's tools.
func TestFloorsRunOneWay(t *testing.T) {
	pkgs := projectPackages(t)
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, "internal/") {
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, "internal/") {
				t.Errorf("%s imports %s: internal/ is the ground floor and imports nothing above it", p.ImportPath, imp)
			}
		}
	}
	rec := deps(pkgs, "recorder")
	if !rec["evidence"] {
		t.Error("the recorder does not link package evidence: the check below follows nothing")
	}
	if rec["examine"] {
		t.Error("the recorder links package examine; it must verify with package evidence only")
	}
}

// TestArchitectureNamesEveryPackage: the package table of
// docs/ARCHITECTURE.md has a row for each package and no other.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc := mustRead(t, architectureFile)
	rows := regexp.MustCompile("(?m)^\\| `([a-z0-9_./-]+)` \\|").FindAllSubmatch(packageTable(t, doc), -1)
	inDoc := map[string]bool{}
	for _, r := range rows {
		inDoc[string(r[1])] = true
	}
	for _, p := range projectPackages(t) {
		if !inDoc[p.ImportPath] {
			t.Errorf("package %s has no row in %s's package table", p.ImportPath, architectureFile)
		}
		delete(inDoc, p.ImportPath)
	}
	for p := range inDoc {
		t.Errorf("%s's package table has a row for %s, which go list does not list", architectureFile, p)
	}
}

// packageTable is the table under "## Packages, one job each".
func packageTable(t *testing.T, doc []byte) []byte {
	t.Helper()
	_, rest, ok := bytes.Cut(doc, []byte("## Packages, one job each\n"))
	if !ok {
		t.Fatalf("%s has no \"Packages, one job each\" section", architectureFile)
	}
	if end := bytes.Index(rest, []byte("\n## ")); end >= 0 {
		rest = rest[:end]
	}
	return rest
}

// importGraph prints, for each package with sources, the project packages
// it imports, in go list's order.
func importGraph(pkgs []listedPackage) string {
	var b strings.Builder
	b.WriteString("```\n")
	for _, p := range pkgs {
		if len(p.GoFiles) == 0 {
			continue // tests only
		}
		imps := slices.Clone(p.Imports)
		slices.Sort(imps)
		if len(imps) == 0 {
			fmt.Fprintf(&b, "%s\n", p.ImportPath)
			continue
		}
		fmt.Fprintf(&b, "%s -> %s\n", p.ImportPath, strings.Join(imps, ", "))
	}
	b.WriteString("```\n")
	return b.String()
}

// TestArchitectureImportGraph: the graph in docs/ARCHITECTURE.md is what
// go list reports today.
func TestArchitectureImportGraph(t *testing.T) {
	doc := mustRead(t, architectureFile)
	before, rest, ok1 := bytes.Cut(doc, []byte(graphBegin+"\n"))
	printed, after, ok2 := bytes.Cut(rest, []byte(graphEnd))
	if !ok1 || !ok2 {
		t.Fatalf("%s has no import graph between %q and %q", architectureFile, graphBegin, graphEnd)
	}
	want := importGraph(projectPackages(t))
	if string(printed) == want {
		return
	}
	if os.Getenv("APTL_UPDATE_ARCHITECTURE") == "1" {
		out := slices.Concat(before, []byte(graphBegin+"\n"), []byte(want), []byte(graphEnd), after)
		if err := os.WriteFile(architectureFile, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the import graph in %s", architectureFile)
		return
	}
	t.Errorf("the import graph in %s is not go list's; run APTL_UPDATE_ARCHITECTURE=1 go test -run TestArchitectureImportGraph ./tests after checking the moves. go list says:\n%s", architectureFile, want)
}
