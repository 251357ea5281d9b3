// Package sha256sums is the one home of the SHA256SUMS format: the text
// GNU coreutils' `sha256sum` prints and `sha256sum -c` checks, one line per
// file, "<64 lowercase hex digits><two spaces><relative path>\n" (text
// mode; sha256sum's binary-mode '*' and its backslash escape for names
// holding a newline or a backslash are never written, and refused when
// read, since no session file is named so). The recorder writes a
// session's manifest with Format; the verifier reads one back with Parse,
// which treats the file as hostile: bounded, strict, every refusal naming
// its line.
package sha256sums

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Entry is one line: a file's path relative to the folder the manifest
// lies in, slash-separated, and its SHA-256 in lowercase hex.
type Entry struct {
	Path   string
	SHA256 string
}

// MaxLine bounds one line: the digest, the separator and a path of at most
// MaxPath bytes, and the newline.
const (
	MaxPath = 1024
	MaxLine = 64 + 2 + MaxPath + 1
)

// ErrMalformed is matched (errors.Is) by every refusal of Parse and Format.
var ErrMalformed = errors.New("sha256sums: malformed")

// Format returns the manifest of entries, sorted by path so that the same
// files always give the same bytes. Every entry must be valid (CheckPath,
// a lowercase hex digest) and every path listed once.
func Format(entries []Entry) ([]byte, error) {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	var out bytes.Buffer
	for i, e := range sorted {
		if err := checkEntry(e); err != nil {
			return nil, err
		}
		if i > 0 && sorted[i-1].Path == e.Path {
			return nil, fmt.Errorf("%w: %q is listed twice", ErrMalformed, e.Path)
		}
		out.WriteString(e.SHA256)
		out.WriteString("  ")
		out.WriteString(e.Path)
		out.WriteByte('\n')
	}
	return out.Bytes(), nil
}

// Parse reads a manifest of at most maxEntries lines. It refuses, naming
// the line, anything Format does not write: a line without its newline,
// an upper-case or short digest, one space or a '*' before the path, an
// escaped name, a path that is absolute, climbs ('..'), or holds an empty
// or '.' component or a control character, and a path listed twice.
func Parse(data []byte, maxEntries int) ([]Entry, error) {
	var entries []Entry
	seen := map[string]bool{}
	for n := 1; len(data) > 0; n++ {
		if len(entries) == maxEntries {
			return nil, fmt.Errorf("%w: more than %d lines", ErrMalformed, maxEntries)
		}
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("%w: line %d: no newline at the end of the file", ErrMalformed, n)
		}
		if nl+1 > MaxLine {
			return nil, fmt.Errorf("%w: line %d: longer than %d bytes", ErrMalformed, n, MaxLine)
		}
		line := string(data[:nl])
		data = data[nl+1:]
		if len(line) < 64+3 || line[64:66] != "  " {
			return nil, fmt.Errorf("%w: line %d: not \"<sha256>  <path>\"", ErrMalformed, n)
		}
		e := Entry{SHA256: line[:64], Path: line[66:]}
		if err := checkEntry(e); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if seen[e.Path] {
			return nil, fmt.Errorf("%w: line %d: %q is listed twice", ErrMalformed, n, e.Path)
		}
		seen[e.Path] = true
		entries = append(entries, e)
	}
	return entries, nil
}

func checkEntry(e Entry) error {
	if !isLowerHex(e.SHA256) {
		return fmt.Errorf("%w: the digest of %.64q is not 64 lowercase hex digits", ErrMalformed, e.Path)
	}
	return CheckPath(e.Path)
}

// CheckPath refuses a path a manifest must not list: empty, longer than
// MaxPath, absolute, with an empty, '.' or '..' component, or holding a
// backslash, a control character or a byte that is not printable ASCII
// (sha256sum would escape it, or a terminal would act on it).
func CheckPath(p string) error {
	if p == "" || len(p) > MaxPath {
		return fmt.Errorf("%w: path of %d bytes (1 to %d)", ErrMalformed, len(p), MaxPath)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c > '~' || c == '\\' || c == '*' {
			return fmt.Errorf("%w: path %.64q holds byte %#02x", ErrMalformed, p, c)
		}
	}
	for part := range strings.SplitSeq(p, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("%w: path %.64q is not a plain relative path", ErrMalformed, p)
		}
	}
	return nil
}

func isLowerHex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
