package evidence

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// readmeCodes returns the `code` spans of the first cell of each row of
// the first table after heading in README.md.
func readmeCodes(t *testing.T, heading string) []string {
	var out []string
	for _, row := range testutil.ReadmeTable(t, "../docs/RECORD.md", heading) {
		out = append(out, testutil.CodeSpans(row[0])...)
	}
	return out
}

func sameSet[T ~string](t *testing.T, what string, readme []string, code []T) {
	t.Helper()
	var c []string
	for _, k := range code {
		c = append(c, string(k))
	}
	a := slices.Clone(readme)
	slices.Sort(a)
	slices.Sort(c)
	if !slices.Equal(a, c) {
		t.Errorf("%s: README.md lists %v, the code %v", what, a, c)
	}
}

// emittedKinds parses the sources of this package and of package examine
// (whose run folder verification and tee reconciliation emit the run-level
// kinds, as evidence.KindX) and returns the Kind constants passed to what
// reports an anomaly or a note (anomaly, damage, note, and Anomaly/Note
// literals' Kind field), or returned to be. A kind that is not a declared
// constant fails the test: every kind the verifier emits has a name, and
// so a row in README.md.
func emittedKinds(t *testing.T) (emitted []Kind) {
	t.Helper()
	consts := map[string]Kind{}
	for _, k := range append(slices.Clone(Kinds), NoteKinds...) {
		consts[string(k)] = k
	}
	var files []string
	for _, pattern := range []string{"*.go", "../examine/*.go"} {
		found, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, found...)
	}
	if !slices.Contains(files, "../examine/reconcile.go") {
		t.Fatal("package examine's sources are not beside this package's")
	}
	fset := token.NewFileSet()
	names := map[string]string{} // constant name -> value, from kinds.go
	var uses []ast.Expr
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							names[id.Name] = v
						}
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && len(n.Args) > 0 &&
					(sel.Sel.Name == "anomaly" || sel.Sel.Name == "damage" || sel.Sel.Name == "note") {
					uses = append(uses, n.Args[0])
				}
			case *ast.KeyValueExpr:
				// A witness class names its file kinds (witnessfiles.go);
				// its checks report them through w.class.
				if key, ok := n.Key.(*ast.Ident); ok && (key.Name == "missingKind" || key.Name == "extraKind") {
					uses = append(uses, n.Value)
				}
			case *ast.CompositeLit:
				if id := unqualified(n.Type); id != nil && (id.Name == "Anomaly" || id.Name == "Note") {
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok && kv.Key.(*ast.Ident).Name == "Kind" {
							uses = append(uses, kv.Value)
						}
					}
				}
			case *ast.ReturnStmt:
				// untrusted returns the kind its caller reports.
				for _, r := range n.Results {
					if id, ok := r.(*ast.Ident); ok && strings.HasPrefix(id.Name, "Kind") {
						uses = append(uses, id)
					}
				}
			}
			return true
		})
	}
	for _, u := range uses {
		if sel, ok := u.(*ast.SelectorExpr); ok && (sel.Sel.Name == "missingKind" || sel.Sel.Name == "extraKind") {
			continue // a witness class's kind, counted where the class is declared
		}
		id := unqualified(u)
		if id == nil {
			t.Errorf("%s: an anomaly's kind must be a named Kind constant", fset.Position(u.Pos()))
			continue
		}
		if id.Name == "kind" {
			continue // a helper's parameter, passed on
		}
		v, ok := consts[names[id.Name]]
		if !ok {
			t.Errorf("%s: kind %s is not in Kinds or NoteKinds", fset.Position(u.Pos()), id.Name)
			continue
		}
		if !slices.Contains(emitted, v) {
			emitted = append(emitted, v)
		}
	}
	return emitted
}

// unqualified is the name of e, an identifier of this package, or of
// package examine's sources qualified by it (evidence.KindTeeMismatch);
// nil for anything else.
func unqualified(e ast.Expr) *ast.Ident {
	switch e := e.(type) {
	case *ast.Ident:
		return e
	case *ast.SelectorExpr:
		if pkg, ok := e.X.(*ast.Ident); ok && pkg.Name == "evidence" {
			return e.Sel
		}
	}
	return nil
}

// TestReadmeListsTheVerifyVocabulary holds README.md's tables of statuses,
// anomaly kinds and note kinds to exactly what the code emits.
func TestReadmeListsTheVerifyVocabulary(t *testing.T) {
	sameSet(t, "statuses", readmeCodes(t, "#### Statuses"), Statuses)
	sameSet(t, "anomaly kinds", readmeCodes(t, "#### Anomaly kinds"), Kinds)
	sameSet(t, "note kinds", readmeCodes(t, "#### Notes"), NoteKinds)

	var anomalies, notes []Kind
	for _, k := range emittedKinds(t) {
		if slices.Contains(NoteKinds, k) {
			notes = append(notes, k)
		} else {
			anomalies = append(anomalies, k)
		}
	}
	var kinds []string
	for _, k := range anomalies {
		kinds = append(kinds, string(k))
	}
	sameSet(t, "anomaly kinds emitted", kinds, Kinds)
	kinds = nil
	for _, k := range notes {
		kinds = append(kinds, string(k))
	}
	sameSet(t, "note kinds emitted", kinds, NoteKinds)
	for _, k := range append(slices.Clone(Kinds), NoteKinds...) {
		if !regexp.MustCompile(`^[a-z]+(-[a-z]+)*$`).MatchString(string(k)) {
			t.Errorf("kind %q is not lowercase words joined by hyphens", k)
		}
	}
}
