package sha256sums

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func digest(b string) string {
	s := sha256.Sum256([]byte(b))
	return hex.EncodeToString(s[:])
}

// The bytes Format writes are what the stock sha256sum checks: it passes
// the folder as written and fails it once a byte changes.
func TestFormatIsCheckedBySha256sum(t *testing.T) {
	bin, err := exec.LookPath("sha256sum")
	if err != nil {
		t.Skip("sha256sum (coreutils) is not installed: the manifest cannot be checked with the stock tool here")
	}
	dir := t.TempDir()
	files := map[string]string{"pty/typescript": "Script started\nhello\n", "pty/timing": "O 0.1 6\n", "pcap/00000001.pcapng": "\x0a\x0d\x0d\x0a"}
	var entries []Entry
	for p, body := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, Entry{Path: p, SHA256: digest(body)})
	}
	manifest, err := Format(entries)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	check := func() error {
		cmd := exec.Command(bin, "--check", "--strict", "--quiet", "SHA256SUMS")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return errors.New(strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := check(); err != nil {
		t.Fatalf("sha256sum -c refused what Format wrote: %v\n%s", err, manifest)
	}
	if err := os.WriteFile(filepath.Join(dir, "pty/timing"), []byte("O 0.1 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := check(); err == nil || !strings.Contains(err.Error(), "pty/timing: FAILED") {
		t.Fatalf("sha256sum -c after a changed byte: %v, want pty/timing FAILED", err)
	}
	got, err := Parse(manifest, 10)
	if err != nil || len(got) != 3 || got[0].Path != "pcap/00000001.pcapng" || got[2].Path != "pty/typescript" {
		t.Fatalf("Parse(Format) = %v, %v; want the three entries in path order", got, err)
	}
}

func TestParseRefusesWhatFormatDoesNotWrite(t *testing.T) {
	d := digest("x")
	for _, tc := range []struct{ name, in, want string }{
		{"no newline", d + "  pty/timing", "line 1: no newline"},
		{"one space", d + " pty/timing\n", "line 1: not"},
		{"binary mode", d + " *pty/timing\n", "line 1: not"},
		{"star path", d + "  *pty/timing\n", "holds byte 0x2a"},
		{"upper hex", strings.ToUpper(d) + "  pty/timing\n", "not 64 lowercase hex"},
		{"short digest", d[:63] + "  pty/timing\n", "line 1: not"},
		{"escaped name", "\\" + d + "  pty/timing\n", "line 1: not"},
		{"absolute", d + "  /etc/passwd\n", "not a plain relative path"},
		{"climbs", d + "  pty/../../etc\n", "not a plain relative path"},
		{"dot", d + "  ./pty/timing\n", "not a plain relative path"},
		{"empty part", d + "  pty//timing\n", "not a plain relative path"},
		{"control", d + "  pty/\x1b[2Jtiming\n", "holds byte 0x1b"},
		{"crlf", d + "  pty/timing\r\n", "holds byte 0x0d"},
		{"space in name", d + "  pty/tim ing\n", "holds byte 0x20"},
		{"backslash", d + "  pty\\timing\n", "holds byte 0x5c"},
		{"twice", d + "  pty/timing\n" + d + "  pty/timing\n", "line 2: \"pty/timing\" is listed twice"},
		{"empty line", d + "  pty/timing\n\n", "line 2: not"},
		{"too long", d + "  " + strings.Repeat("a", MaxPath+1) + "\n", "line 1: longer than"},
		{"too many", d + "  a\n" + d + "  b\n" + d + "  c\n", "more than 2 lines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in), 2)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) = %v, want a refusal saying %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestFormatRefusesWhatParseWouldRefuse(t *testing.T) {
	d := digest("x")
	for _, entries := range [][]Entry{
		{{Path: "pty/timing", SHA256: d}, {Path: "pty/timing", SHA256: d}},
		{{Path: "../x", SHA256: d}},
		{{Path: "pty/timing", SHA256: "nothex"}},
	} {
		if out, err := Format(entries); !errors.Is(err, ErrMalformed) {
			t.Errorf("Format(%v) = %q, %v; want a refusal", entries, out, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(digest("x") + "  pty/timing\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := Parse(data, 100)
		if err != nil {
			return
		}
		// What Parse accepts, Format writes back to the same set.
		again, err := Format(entries)
		if err != nil {
			t.Fatalf("Format refused what Parse accepted: %v", err)
		}
		back, err := Parse(again, 100)
		if err != nil || len(back) != len(entries) {
			t.Fatalf("round trip: %v, %d entries, want %d", err, len(back), len(entries))
		}
	})
}
