package compose

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The checks read the YAML as a generic tree (maps, lists, scalars) so that
// the mutation tests can change any key of a parsed copy, re-marshal it and
// feed it back through the same parser the real files go through.

type tree = map[string]any

// repoFile returns the path of a file relative to the repository root.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test file")
	}
	return filepath.Join(filepath.Dir(self), "..", "..", rel)
}

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(repoFile(t, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return data
}

// parseDocs parses every YAML document of data.
func parseDocs(data []byte) ([]tree, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var docs []tree
	for {
		var doc tree
		err := dec.Decode(&doc)
		if err != nil {
			if err.Error() == "EOF" {
				return docs, nil
			}
			return nil, fmt.Errorf("parse yaml: %w", err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

func mapAt(m tree, key string) tree {
	v, _ := m[key].(tree)
	return v
}

func listAt(m tree, key string) []any {
	v, _ := m[key].([]any)
	return v
}

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// strings of a list of scalars.
func strList(m tree, key string) []string {
	var out []string
	for _, v := range listAt(m, key) {
		out = append(out, str(v))
	}
	return out
}

func containsFold(list []string, want string) bool {
	for _, s := range list {
		if strings.EqualFold(s, want) {
			return true
		}
	}
	return false
}

var defaultRef = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}`)

// withDefaults resolves ${VAR:-default} to its default (and ${VAR} to ""),
// so the checks judge what the file does when nothing overrides it.
func withDefaults(s string) string {
	return defaultRef.ReplaceAllStringFunc(s, func(ref string) string {
		return defaultRef.FindStringSubmatch(ref)[1]
	})
}

// envOf returns a service's or container's environment as a map, from a
// Compose map, a Compose KEY=VALUE list or a Kubernetes name/value list.
func envOf(m tree, key string) map[string]string {
	env := map[string]string{}
	switch v := m[key].(type) {
	case tree:
		for k, val := range v {
			env[k] = str(val)
		}
	case []any:
		for _, item := range v {
			switch e := item.(type) {
			case string:
				k, val, _ := strings.Cut(e, "=")
				env[k] = val
			case tree:
				env[str(e["name"])] = str(e["value"])
			}
		}
	}
	return env
}

// marshal re-encodes a mutated tree for the checks to parse again.
func marshal(t *testing.T, docs ...tree) []byte {
	t.Helper()
	var b strings.Builder
	for i, d := range docs {
		if i > 0 {
			b.WriteString("---\n")
		}
		out, err := yaml.Marshal(d)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		b.Write(out)
	}
	return []byte(b.String())
}

// deepCopy copies a parsed tree so each mutation starts from the real file.
func deepCopy(v any) any {
	switch x := v.(type) {
	case tree:
		c := tree{}
		for k, val := range x {
			c[k] = deepCopy(val)
		}
		return c
	case []any:
		c := make([]any, len(x))
		for i, val := range x {
			c[i] = deepCopy(val)
		}
		return c
	default:
		return x
	}
}

// expectViolation fails unless one of the violations contains want.
func expectViolation(t *testing.T, violations []string, want string) {
	t.Helper()
	for _, v := range violations {
		if strings.Contains(v, want) {
			return
		}
	}
	t.Errorf("no violation containing %q; got %q", want, violations)
}
