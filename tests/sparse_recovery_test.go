package tests

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// sparseSize is 1 TiB: a sparse file of that size costs no disk, but
// reading it costs hours.
const sparseSize = 1 << 40

// makeSparse extends path to size without writing, or skips the test
// where the filesystem cannot hold such a file.
func makeSparse(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Skipf("this filesystem cannot hold a sparse %d-byte file: %v", size, err)
	}
}

// TestSparseTypescriptDoesNotDelayListening: an unfinalized session whose
// typescript and timing files a forger extended to 1 TiB (sparse). The
// restarted server must listen promptly, recover the session in the
// background without reading the terabytes (the recovery record states
// their size), and verify must report the tails as anomalies.
func TestSparseTypescriptDoesNotDelayListening(t *testing.T) {
	bin := buildForLiveTest(t)
	work := t.TempDir()
	state, root := filepath.Join(work, "state"), filepath.Join(work, "captures")
	hostKey, err := broker.LoadOrCreateKey(filepath.Join(state, broker.HostKeyFile), "test host")
	if err != nil {
		t.Fatal(err)
	}
	dir := recordertest.Unfinalized(t, root, "run-sparse", "sess-sparse", hostKey, nil, nil)
	makeSparse(t, filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile), sparseSize)
	makeSparse(t, filepath.Join(dir, vocab.PTYDir, vocab.TimingFile), sparseSize)

	srv := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--state-dir", state, "--root", root,
		"--ready-file", filepath.Join(work, "ready"))
	logs := &testutil.LockedBuffer{}
	srv.Stdout, srv.Stderr = logs, logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	listening := regexp.MustCompile(`msg=listening addr=(\S+)`)
	waitFor(t, 10*time.Second, "the server to listen", func() bool { return listening.MatchString(logs.String()) })
	c, err := net.DialTimeout("tcp", listening.FindStringSubmatch(logs.String())[1], 5*time.Second)
	if err != nil {
		t.Fatalf("the server logged listening but does not accept: %v", err)
	}
	c.Close()
	waitFor(t, 20*time.Second, "the background recovery to finish", func() bool {
		return strings.Contains(logs.String(), "recovery of unfinalized sessions finished")
	})
	if !strings.Contains(logs.String(), "unfinalized session recovered") || !strings.Contains(logs.String(), "sess-sparse") {
		t.Errorf("the logs do not state the session's recovery:\n%s", logs.String())
	}
	if _, err := os.Lstat(filepath.Join(dir, vocab.PTYDir, vocab.RecoveryFile)); err != nil {
		t.Fatalf("no recovery record: %v\n%s", err, logs.String())
	}
	out, code := runCommand(t, bin, "verify", "--key", writePubKey(t, hostKey.PublicKey()), dir)
	for _, want := range []string{
		vocab.TypescriptFile + " record 2 offset 68: file is 1099511627776 bytes",
		vocab.TimingFile + " record 2 offset 13: file is 1099511627776 bytes",
		"the restarted sidecar did not read the typescript: file is 1099511627776 bytes",
	} {
		if code != 1 || !strings.Contains(string(out), want) {
			t.Errorf("verify: exit %d, want 1 and %q in:\n%s", code, want, out)
		}
	}
}
