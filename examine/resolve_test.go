package examine_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/examine"
)

// TestResolveSession: a path that exists is returned as given, even when it
// also reads as an id; RUN/SESSION and a SESSION unique under the root
// resolve to <root>/<run>/<session>; an ambiguous SESSION lists its
// candidates, bounded; an id that matches nothing says where it was looked
// for; what is not an id (.., a separator too many, a leading dot) is
// refused before it is joined to the root; a linked run is not followed.
func TestResolveSession(t *testing.T) {
	root := t.TempDir()
	mkdir := func(rel string) string {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	only := mkdir("run-a/only-here")
	mkdir("run-a/twice")
	mkdir("run-b/twice")
	mkdir("_sidecar/only-here") // the sidecar's folder holds no session
	for i := range examine.MaxCandidates + 2 {
		mkdir(fmt.Sprintf("many-%02d/common", i))
	}
	outside := t.TempDir()
	if err := os.Mkdir(filepath.Join(outside, "s"), 0o700); err != nil {
		t.Fatal(err)
	}
	linked := os.Symlink(outside, filepath.Join(root, "linked")) == nil

	// A path that exists wins, even one that reads as RUN/SESSION.
	cwd := t.TempDir()
	t.Chdir(cwd)
	if err := os.MkdirAll(filepath.Join("run-a", "twice"), 0o700); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		arg, want string
		wantErr   []string // in the message, in order of appearance not required
		noSession bool
	}{
		{arg: "run-a/twice", want: "run-a/twice"}, // the relative path in cwd, not the id
		{arg: only, want: only},
		{arg: "run-b/twice", want: filepath.Join(root, "run-b", "twice")},
		{arg: "only-here", want: only},
		{arg: "twice", wantErr: []string{`"twice"`, "run-a/twice", "run-b/twice", "give RUN/SESSION"}},
		{arg: "common", wantErr: []string{"many-00/common", fmt.Sprintf("many-%02d/common", examine.MaxCandidates-1), "and 2 more"}},
		{arg: "run-a/nothing", wantErr: []string{`"run-a/nothing"`, root}, noSession: true},
		{arg: "nothing", wantErr: []string{`"nothing"`, root}, noSession: true},
		{arg: "../run-a", wantErr: []string{"not a session id"}},
		{arg: "run-a/../../etc", wantErr: []string{"not a session id"}},
		{arg: "run-a/.hidden", wantErr: []string{"not a session id"}},
		{arg: "/no/such/abs", wantErr: []string{"not a session id"}},
	} {
		got, err := examine.ResolveSession(root, tt.arg)
		if tt.wantErr == nil {
			if err != nil || got != tt.want {
				t.Errorf("ResolveSession(%q) = %q, %v; want %q", tt.arg, got, err, tt.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("ResolveSession(%q) = %q; want an error", tt.arg, got)
			continue
		}
		for _, w := range tt.wantErr {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ResolveSession(%q): %q does not say %q", tt.arg, err, w)
			}
		}
		if errors.Is(err, examine.ErrNoSession) != tt.noSession {
			t.Errorf("ResolveSession(%q): %v; errors.Is(ErrNoSession) = %v, want %v", tt.arg, err, !tt.noSession, tt.noSession)
		}
		if strings.Contains(tt.arg, "common") && strings.Contains(err.Error(), fmt.Sprintf("many-%02d/common", examine.MaxCandidates)) {
			t.Errorf("ResolveSession(%q) lists more than %d candidates: %v", tt.arg, examine.MaxCandidates, err)
		}
	}
	if linked {
		if got, err := examine.ResolveSession(root, "linked/s"); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("ResolveSession(linked/s) = %q, %v; want the linked run refused", got, err)
		}
	}
}
