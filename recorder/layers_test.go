package recorder

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRecorderDoesNotLinkTheExaminersTools: the sidecar's startup
// recovery verifies with package evidence, and nothing the recorder links
// reaches package examine (the exporter, the player, ls, the tee
// reconciler), and internal/safefs imports nothing of the project outside
// internal/ (docs/ARCHITECTURE.md). The imports of every non-test source
// file, whatever its build tags, are followed through the module, so the
// check holds on every OS at once.
func TestRecorderDoesNotLinkTheExaminersTools(t *testing.T) {
	const module = "github.com/aptl/aptl-kali-capture"
	deps := func(pkg string) map[string]bool {
		seen := map[string]bool{}
		var walk func(pkg string)
		walk = func(pkg string) {
			if seen[pkg] {
				return
			}
			seen[pkg] = true
			dir := filepath.Join("..", strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/"))
			files, err := filepath.Glob(filepath.Join(dir, "*.go"))
			if err != nil || len(files) == 0 {
				t.Fatalf("package %s: no sources in %s (%v)", pkg, dir, err)
			}
			for _, name := range files {
				if strings.HasSuffix(name, "_test.go") {
					continue
				}
				f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
				if err != nil {
					t.Fatal(err)
				}
				for _, imp := range f.Imports {
					path, _ := strconv.Unquote(imp.Path.Value)
					if path == module || strings.HasPrefix(path, module+"/") {
						walk(path)
					}
				}
			}
		}
		walk(pkg)
		return seen
	}
	if _, err := os.Stat("../examine"); err != nil {
		t.Fatalf("package examine is not beside the recorder: %v", err)
	}
	recorderDeps := deps(module + "/recorder")
	if recorderDeps[module+"/examine"] {
		t.Errorf("the recorder links package examine; it must verify with package evidence only")
	}
	if !recorderDeps[module+"/evidence"] {
		t.Errorf("the recorder does not link package evidence: the check follows nothing")
	}
	for pkg := range deps(module + "/internal/safefs") {
		if pkg != module+"/internal/safefs" && !strings.HasPrefix(pkg, module+"/internal/") {
			t.Errorf("internal/safefs links %s, outside internal/", pkg)
		}
	}
}
