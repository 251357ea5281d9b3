package pcap_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestPcapRotationAndVerify: with 1 MiB files and 3 of them, 5 MiB of
// traffic gives exactly 3 files of at most 1 MiB, and a gap record for
// what was not stored; verify passes the untouched session and finds a
// flipped byte, a deleted rotated file, an extra file and a truncated
// last file.
func TestPcapRotationAndVerify(t *testing.T) {
	requireTools(t)
	l := newLab(t)
	s := serve(t, l.side, "0.0.0.0:2222", []string{"APTL_CAPTURE_PCAP_ROTATE_MB=1", "APTL_CAPTURE_PCAP_FILES=3"})
	l.root, l.signer, l.hostPub = s.root, s.signer, s.hostPub
	sess := l.open(l.peers[0], sidecarAddr+":2222", "run1", "rot")
	payload := "mark-bulk-" + strings.Repeat("x", 1300)
	testutil.InNetns(t, l.peers[0], func() error {
		for i := 0; i < 4000; i++ { // 4000 frames of ~1.35 KB: about 5.4 MB
			if err := udpOnce(sidecarAddr, payload); err != nil {
				return err
			}
		}
		return nil
	})
	l.end(sess)

	names, _ := filepath.Glob(filepath.Join(sess.dir, "pcap", "*"))
	if len(names) != 3 {
		t.Fatalf("%d pcap files, want 3: %v", len(names), names)
	}
	for i, n := range names {
		fi, _ := os.Stat(n)
		if fi.Size() > 1<<20 || (i < 2 && fi.Size() < 1<<20-4096) {
			t.Errorf("%s is %d bytes; want at most 1 MiB, and full up to the last", n, fi.Size())
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", n, fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(filepath.Join(sess.dir, "pcap")); fi.Mode().Perm() != 0o700 {
		t.Errorf("pcap folder mode %v, want 0700", fi.Mode().Perm())
	}
	c := closeRecord(t, sess.dir)
	if c.Attrs["pcap_files"] != "3" {
		t.Errorf("close record pcap_files=%q, want 3", c.Attrs["pcap_files"])
	}
	rep := verifyOK(t, sess.dir, s.hostPub)
	var rotated int64
	for _, g := range rep.Gaps {
		if g.Reason == "pcap-rotation-limit" {
			rotated = g.Count
		}
	}
	if rotated <= 0 {
		t.Fatalf("no pcap-rotation-limit gap stating the packets not stored: %+v", rep.Gaps)
	}
	if rep.Pcap == nil || rep.Pcap.Files != 3 {
		t.Errorf("verify pcap report %+v, want 3 files", rep.Pcap)
	}
	readersAccept(t, sess.dir)

	tamper := []struct {
		name   string
		change func(dir string)
		want   string
	}{
		{"flipped byte", func(dir string) { flipByte(t, filepath.Join(dir, "pcap", "capture-000001.pcapng"), 5000) }, "altered"},
		{"deleted rotated file", func(dir string) { os.Remove(filepath.Join(dir, "pcap", "capture-000002.pcapng")) }, "missing"},
		{"extra file", func(dir string) {
			os.WriteFile(filepath.Join(dir, "pcap", "capture-000004.pcapng"), []byte("x"), 0o600)
		}, "extra"},
		{"truncated last file", func(dir string) {
			p := filepath.Join(dir, "pcap", "capture-000003.pcapng")
			fi, _ := os.Stat(p)
			os.Truncate(p, fi.Size()-100)
		}, "truncated"},
	}
	for _, tc := range tamper {
		t.Run(tc.name, func(t *testing.T) {
			dir := copySession(t, sess.dir)
			tc.change(dir)
			rep := verifyDir(t, dir, s.hostPub)
			if rep.OK() || !anomalyHas(rep, tc.want) {
				t.Fatalf("verify after %s: OK=%v, anomalies %v; want one saying %q", tc.name, rep.OK(), rep.Anomalies, tc.want)
			}
		})
	}
}

func anomalyHas(rep *evidence.Report, s string) bool {
	for _, a := range rep.Anomalies {
		if strings.Contains(a.String(), s) {
			return true
		}
	}
	return false
}

func flipByte(t *testing.T, path string, off int64) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, off)
	b[0] ^= 0xff
	f.WriteAt(b, off)
}

// copySession copies a session folder to <tmp>/<run>/<session>, so it
// still lies where its ids say.
func copySession(t *testing.T, dir string) string {
	dst := filepath.Join(t.TempDir(), filepath.Base(filepath.Dir(dir)))
	os.MkdirAll(dst, 0o700)
	if out, err := exec.Command("cp", "-a", dir, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	return filepath.Join(dst, filepath.Base(dir))
}

// TestPcapDegradedWithoutNetRaw: without CAP_NET_RAW the sidecar still
// serves; readiness says pcap=degraded, a session runs and is transcribed,
// and its open record says pcap was unavailable.
func TestPcapDegradedWithoutNetRaw(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("dropping CAP_NET_RAW with capsh needs root")
	}
	if _, err := exec.LookPath("capsh"); err != nil {
		t.Skip("needs capsh (Debian libcap2-bin)")
	}
	requireNetns(t)
	l := newLab(t)
	s := serve(t, l.side, "0.0.0.0:2222", nil, "capsh", "--drop=cap_net_raw", "--")
	if got := s.readiness()["pcap"]; got != "degraded" {
		t.Fatalf("readiness pcap=%q, want degraded", got)
	}
	sess := s.open(l.peers[0], sidecarAddr+":2222", "run1", "nopcap")
	if _, err := sess.stdin.Write([]byte("typed while degraded\n")); err != nil {
		t.Fatal(err)
	}
	s.end(sess)
	b, _ := os.ReadFile(filepath.Join(sess.dir, "pty", "typescript"))
	if !strings.Contains(string(b), "typed while degraded") {
		t.Errorf("the typescript lacks the session's bytes")
	}
	log, _ := os.ReadFile(filepath.Join(sess.dir, "pty", "integrity.jsonl"))
	if !strings.Contains(string(log), `"pcap":"unavailable"`) || !strings.Contains(string(log), "pcap_reason") {
		t.Errorf("the open record does not say pcap was unavailable:\n%.600s", log)
	}
	rep := verifyOK(t, sess.dir, s.hostPub)
	if rep.Pcap == nil || rep.Pcap.State != "unavailable" {
		t.Errorf("verify pcap report %+v, want state unavailable", rep.Pcap)
	}
}
