package recorder

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
)

func TestValidID(t *testing.T) {
	tests := []struct {
		name, id string
		want     bool
	}{
		{"simple", "run-1.2_x", true},
		{"single char", "a", true},
		{"underscore first", "_x", true},
		{"digit first", "7abc", true},
		{"128 bytes", strings.Repeat("a", 128), true},
		{"empty", "", false},
		{"dot", ".", false},
		{"dotdot", "..", false},
		{"dotdot inside", "a..b", false},
		{"dotdot at end", "a..", false},
		{"hidden", ".hidden", false},
		{"dash first", "-x", false},
		{"129 bytes", strings.Repeat("a", 129), false},
		{"unicode", "sessión", false},
		{"slash", "a/b", false},
		{"backslash", `a\b`, false},
		{"NUL", "a\x00b", false},
		{"space", "a b", false},
		{"newline", "a\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValidID(tt.id); got != tt.want {
				t.Errorf("ValidID(%q) = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
}

func TestReservedRunID(t *testing.T) {
	tests := []struct {
		name, id string
		want     bool
	}{
		{"audit", "_audit", true},
		{"proc-acct", "_proc-acct", true},
		{"sidecar", "_sidecar", true},
		{"other underscore", "_unbound", false},
		{"case differs", "_AUDIT", false},
		{"suffix", "_audit2", false},
		{"plain", "run-1", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ReservedRunID(tt.id); got != tt.want {
				t.Errorf("ReservedRunID(%q) = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
}

// newTestSession creates a session under a fresh root with the tests'
// settings; see createSession.
func newTestSession(tb testing.TB, m Meta) *Session {
	tb.Helper()
	return createSession(tb, tb.TempDir(), m, testOptions())
}

// createSession creates a session and, at the end of the test, closes it
// if the test did not and checks it with the verifier: every record a
// recorder test leaves must verify, ok unless the test states otherwise
// with leaves. So a recorder change that breaks the evidence fails the
// test that wrote the record, not only the verifier's own tests.
func createSession(tb testing.TB, root string, m Meta, opts Options) *Session {
	tb.Helper()
	s, err := Create(root, m, opts)
	if err != nil {
		tb.Fatalf("Create %s/%s: %v", m.RunID, m.SessionID, err)
	}
	tb.Cleanup(func() {
		s.Close(0)
		want := evidence.StatusOK
		if w, ok := leftAs.LoadAndDelete(s); ok {
			want = w.(evidence.Status)
		}
		keys := evidence.Keys{Trusted: []gossh.PublicKey{opts.Signer.PublicKey()}}
		if rep := evidence.Verify(s.Dir(), keys, evidence.Options{}); rep.Status != want {
			tb.Errorf("session %s/%s left by the test verifies %s, want %s: %+v", m.RunID, m.SessionID, rep.Status, want, rep.Anomalies)
		}
	})
	return s
}

// leftAs holds, per session, the status a test expects its record to
// verify as when it is not ok (a session the test damages on purpose).
var leftAs sync.Map

// leaves states that the test leaves s's record in status want.
func leaves(s *Session, want evidence.Status) { leftAs.Store(s, want) }

func TestCreateSessionExists(t *testing.T) {
	root := t.TempDir()
	m := Meta{RunID: "run-1", SessionID: "s1"}
	s := createSession(t, root, m, testOptions())
	if err := s.Close(0); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := Create(root, m, testOptions()); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("second Create = %v, want ErrSessionExists", err)
	}
	// The refused Create must leave the first record untouched.
	ts, err := os.ReadFile(filepath.Join(s.Dir(), "pty", "typescript"))
	if err != nil || !strings.Contains(string(ts), "Script done on") {
		t.Fatalf("first record damaged: err=%v len=%d", err, len(ts))
	}
	// Another session in the same run is fine.
	s2 := createSession(t, root, Meta{RunID: "run-1", SessionID: "s2"}, testOptions())
	s2.Close(0)
}

func TestCreateRefusesBeforeTouchingDisk(t *testing.T) {
	tests := []struct {
		name string
		m    Meta
		want error
	}{
		{"reserved audit", Meta{RunID: "_audit", SessionID: "s1"}, ErrReservedRunID},
		{"reserved proc-acct", Meta{RunID: "_proc-acct", SessionID: "s1"}, ErrReservedRunID},
		{"reserved sidecar", Meta{RunID: "_sidecar", SessionID: "s1"}, ErrReservedRunID},
		{"run dotdot", Meta{RunID: "..", SessionID: "s1"}, ErrInvalidID},
		{"run empty", Meta{RunID: "", SessionID: "s1"}, ErrInvalidID},
		{"run slash", Meta{RunID: "a/b", SessionID: "s1"}, ErrInvalidID},
		{"session dotdot", Meta{RunID: "r", SessionID: ".."}, ErrInvalidID},
		{"session empty", Meta{RunID: "r", SessionID: ""}, ErrInvalidID},
		{"session slash", Meta{RunID: "r", SessionID: "../../etc"}, ErrInvalidID},
		{"session NUL", Meta{RunID: "r", SessionID: "s\x00"}, ErrInvalidID},
		{"header lowercase", Meta{RunID: "r", SessionID: "s", Headers: []Header{{Name: "aptl_x", Value: "v"}}}, errHeaderName},
		{"header space", Meta{RunID: "r", SessionID: "s", Headers: []Header{{Name: "APTL X", Value: "v"}}}, errHeaderName},
		{"header newline", Meta{RunID: "r", SessionID: "s", Headers: []Header{{Name: "APTL\nO", Value: "v"}}}, errHeaderName},
		{"header empty", Meta{RunID: "r", SessionID: "s", Headers: []Header{{Name: "", Value: "v"}}}, errHeaderName},
		{"header too long", Meta{RunID: "r", SessionID: "s", Headers: []Header{{Name: strings.Repeat("A", 129), Value: "v"}}}, errHeaderName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "capture")
			s, err := Create(root, tt.m, testOptions())
			if !errors.Is(err, tt.want) {
				t.Fatalf("Create = %v, want %v", err, tt.want)
			}
			if s != nil {
				t.Errorf("Create returned a session with error %v", err)
			}
			if _, err := os.Stat(root); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("root exists after refused Create (stat err %v)", err)
			}
		})
	}
}

func TestCreateModes(t *testing.T) {
	root := t.TempDir()
	s := createSession(t, root, Meta{RunID: "run-1", SessionID: "s1"}, testOptions())
	defer s.Close(0)
	if want := filepath.Join(root, "run-1", "s1"); s.Dir() != want {
		t.Errorf("Dir() = %q, want %q", s.Dir(), want)
	}
	tests := []struct {
		path  string
		isDir bool
		want  fs.FileMode
	}{
		{filepath.Join(root, "run-1"), true, 0o700},
		{s.Dir(), true, 0o700},
		{filepath.Join(s.Dir(), "pty"), true, 0o700},
		{filepath.Join(s.Dir(), "pty", "typescript"), false, 0o600},
		{filepath.Join(s.Dir(), "pty", "timing"), false, 0o600},
	}
	for _, tt := range tests {
		fi, err := os.Lstat(tt.path)
		if err != nil {
			t.Errorf("stat: %v", err)
			continue
		}
		if fi.IsDir() != tt.isDir || fi.Mode().Perm() != tt.want {
			t.Errorf("%s: mode %v, want dir=%v perm %v", tt.path, fi.Mode(), tt.isDir, tt.want)
		}
	}
}
