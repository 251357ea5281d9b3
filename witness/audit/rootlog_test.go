package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readRootLogs returns the contents of name, name.1, ... in dir, and
// whether each exists, up to n files.
func readRootLogs(t *testing.T, path string, n int) []string {
	t.Helper()
	var got []string
	for i := range n {
		p := path
		if i > 0 {
			p = path + "." + string(rune('0'+i))
		}
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			got = append(got, "<none>")
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	return got
}

// Equivalent mutant (gremlins): rootlog.go rotate's first name `Files - 2`
// -> `+ 2`: the renames of names past the oldest find nothing to move.

// TestRootLogRotatesAsAuditdDoes: the capture root's audit.log fills to
// exactly RotateBytes before it rotates; the record that would cross it
// starts the new file, the older ones move up one, and past Files the
// oldest is removed. A record larger than RotateBytes is still written,
// whole, into an empty file rather than rotating forever.
func TestRootLogRotatesAsAuditdDoes(t *testing.T) {
	root := t.TempDir()
	l, err := openRootLog(root, "_audit", "audit.log", Limits{RotateBytes: 10, Files: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	for _, rec := range []string{"aaaaa", "bbbbb", "c", "dddddddddd", "eeeeeeeeeeee"} {
		if err := l.write([]byte(rec)); err != nil {
			t.Fatalf("write %q: %v", rec, err)
		}
	}
	// aaaaa+bbbbb fill 10 exactly; c rotates; c+dddddddddd would be 11, so
	// d rotates (aaaaabbbbb goes past Files and is removed); e (12 bytes,
	// over the limit) rotates once and is written whole.
	want := []string{"eeeeeeeeeeee", "dddddddddd", "c"}
	got := readRootLogs(t, filepath.Join(root, "_audit", "audit.log"), 4)
	if strings.Join(got[:3], "|") != strings.Join(want, "|") || got[3] != "<none>" {
		t.Errorf("rotated logs %q, want %q and no fourth", got, want)
	}
	// A new log whose first record is over the limit: no empty .1.
	fresh, err := openRootLog(root, "_fresh", "audit.log", Limits{RotateBytes: 10, Files: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.close()
	if err := fresh.write([]byte("ffffffffffff")); err != nil {
		t.Fatal(err)
	}
	if got := readRootLogs(t, filepath.Join(root, "_fresh", "audit.log"), 2); got[0] != "ffffffffffff" || got[1] != "<none>" {
		t.Errorf("a new log's oversized first record: logs %q, want it alone in audit.log", got)
	}
}

// TestRootLogOneFileStartsOver: with Files 1 there is no audit.log.1:
// rotating starts the one file over.
func TestRootLogOneFileStartsOver(t *testing.T) {
	root := t.TempDir()
	l, err := openRootLog(root, "_audit", "audit.log", Limits{RotateBytes: 4, Files: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	for _, rec := range []string{"old.", "new"} {
		if err := l.write([]byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	got := readRootLogs(t, filepath.Join(root, "_audit", "audit.log"), 2)
	if got[0] != "new" || got[1] != "<none>" {
		t.Errorf("logs %q, want only audit.log holding the newest record", got)
	}
}

// TestRootLogCloseAndReopen: close releases the file, and sync and close
// of a closed log do nothing; the next write opens it again and appends.
func TestRootLogCloseAndReopen(t *testing.T) {
	root := t.TempDir()
	l, err := openRootLog(root, "_proc-acct", "proc-acct.log", Limits{RotateBytes: 1 << 20, Files: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.write([]byte("first\n")); err != nil {
		t.Fatal(err)
	}
	f := l.f
	if err := l.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := f.Stat(); err == nil {
		t.Error("the file is still open after close")
	}
	if err := l.sync(); err != nil {
		t.Errorf("sync of a closed log = %v, want nothing to do", err)
	}
	if err := l.close(); err != nil {
		t.Errorf("second close = %v, want nothing to do", err)
	}
	if err := l.write([]byte("second\n")); err != nil {
		t.Fatalf("write after close: %v", err)
	}
	defer l.close()
	if got := readRootLogs(t, filepath.Join(root, "_proc-acct", "proc-acct.log"), 1); got[0] != "first\nsecond\n" {
		t.Errorf("log %q, want both records in order", got[0])
	}
}
