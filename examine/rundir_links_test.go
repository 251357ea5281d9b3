//go:build linux

package examine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/examine"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// TestVerifyRunReportsLinkedFolders: a run whose kali-side folder, or
// whose mcp-side/sessions folder, is a symbolic link to sessions and tees
// elsewhere. verify --run-dir must not follow either, and must say so as
// an anomaly naming the folder, as it does for links in a session folder.
func TestVerifyRunReportsLinkedFolders(t *testing.T) {
	for _, linked := range []string{"kali-side", "mcp-side/sessions"} {
		t.Run(strings.ReplaceAll(linked, "/", "_"), func(t *testing.T) {
			elsewhere, runDir := recordertest.NewRunDir(t), recordertest.NewRunDir(t)
			recordertest.Record(t, elsewhere, recordertest.PTYSpec("s1"))
			writeTeeText(t, elsewhere, "s1", "")
			// runDir gets the other folder for real, and this one as a link.
			for _, part := range []string{"kali-side", "mcp-side/sessions"} {
				src, dst := filepath.Join(elsewhere, part), filepath.Join(runDir, part)
				if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
					t.Fatal(err)
				}
				link := os.Rename
				if part == linked {
					link = os.Symlink
				}
				if err := link(src, dst); err != nil {
					t.Fatal(err)
				}
			}
			rr := examine.VerifyRun(runDir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
			path := filepath.Join(runDir, linked)
			var found bool
			for _, a := range rr.Anomalies {
				found = found || strings.Contains(a.Msg, path+" is a symbolic link, which is not followed")
			}
			if !found || rr.OK() {
				t.Errorf("verify --run-dir with %s a symbolic link: want an anomaly naming it; got %+v", linked, rr.Anomalies)
			}
		})
	}
}
