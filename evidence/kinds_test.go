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
	"github.com/aptl/aptl-kali-capture/internal/vocab"
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

// TestEveryKindHasOneClass: every anomaly kind is in exactly one finding
// class of vocab's list, the table names no kind that is not one, and
// every class is some kind's or GapRecorded (a gap's, Gap.MarshalJSON).
func TestEveryKindHasOneClass(t *testing.T) {
	used := map[string]bool{vocab.FindingGapRecorded: true}
	for _, k := range Kinds {
		c := k.Class()
		if !slices.Contains(vocab.FindingClasses, c) {
			t.Errorf("kind %s: class %q is not in vocab.FindingClasses", k, c)
		}
		used[c] = true
	}
	for k := range kindClasses {
		if !slices.Contains(Kinds, k) {
			t.Errorf("kindClasses holds %q, which is not in Kinds", k)
		}
	}
	for _, c := range vocab.FindingClasses {
		if !used[c] {
			t.Errorf("class %s is no kind's, and not GapRecorded", c)
		}
		if !regexp.MustCompile(`^([A-Z][a-z]*)+$`).MatchString(c) {
			t.Errorf("class %q is not CamelCase words", c)
		}
	}
	if len(vocab.FindingClasses) != len(slices.Compact(slices.Sorted(slices.Values(vocab.FindingClasses)))) {
		t.Errorf("vocab.FindingClasses lists a class twice: %v", vocab.FindingClasses)
	}
}

// TestDocsListTheFindingClasses holds docs/RECORD.md's table of finding
// classes, its kinds row by row, and README.md's compact table to exactly
// vocab's classes and this package's table.
func TestDocsListTheFindingClasses(t *testing.T) {
	var classes []string
	for _, row := range testutil.ReadmeTable(t, "../docs/RECORD.md", "#### Finding classes") {
		cs := testutil.CodeSpans(row[0])
		classes = append(classes, cs...)
		if len(cs) != 1 || len(row) < 2 {
			t.Errorf("docs/RECORD.md: row %v names not one class", row)
			continue
		}
		var want []Kind
		for _, k := range Kinds {
			if k.Class() == cs[0] {
				want = append(want, k)
			}
		}
		sameSet(t, "kinds of class "+cs[0], testutil.CodeSpans(row[1]), want)
	}
	sameSet(t, "finding classes (docs/RECORD.md)", classes, vocab.FindingClasses)
	classes = nil
	for _, row := range testutil.ReadmeTable(t, "../README.md", "### Findings and exit status") {
		classes = append(classes, testutil.CodeSpans(row[0])...)
	}
	sameSet(t, "finding classes (README.md)", classes, vocab.FindingClasses)
}

// TestClassCounterSummary: the summary counts anomalies by class and gaps
// as GapRecorded, in vocab's order, and lists no class without a finding.
func TestClassCounterSummary(t *testing.T) {
	c := ClassCounter{}
	c.Add([]Anomaly{{Kind: KindUnfinalized}, {Kind: KindDataDigestMismatch}, {Kind: KindFileDigestMismatch}}, []Gap{{}, {}})
	o := ClassCounter{}
	o.Add([]Anomaly{{Kind: KindFileUnreadable}}, nil)
	c.Merge(o)
	want := []ClassCount{{vocab.FindingMissingFile, 1}, {vocab.FindingChecksumMismatch, 2}, {vocab.FindingUnfinalized, 1}, {vocab.FindingGapRecorded, 2}}
	if got := c.Summary(); !slices.Equal(got, want) {
		t.Errorf("summary %v, want %v", got, want)
	}
	if got := (ClassCounter{}).Summary(); got == nil || len(got) != 0 {
		t.Errorf("empty summary %#v, want []", got)
	}
}
