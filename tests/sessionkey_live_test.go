package tests

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/sessionkey"
)

// TestSessionKeyIsGoneOnceSealed runs the sidecar as a lab does with
// session keys: a CA made by stock ssh-keygen, a pool provisioned with
// `keys provision` and copied onto the state volume, serve --session-keys
// pool. While the session runs, its key's seed is in its signer child's
// memory (the scan's positive control) and nowhere in serve's; once the
// session is closed, no file under the sidecar's folders and no process
// of the sidecar holds it, and stock ssh-keygen verifies the session's
// manifest with the CA alone at the session's start.
func TestSessionKeyIsGoneOnceSealed(t *testing.T) {
	bin := buildForLiveTest(t)
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Skip("ssh-keygen (openssh-client) is not installed: the CA is made and the manifest checked with it")
	}
	if os.Geteuid() != 0 {
		t.Skip("reads the sidecar's processes' memory (/proc/<pid>/mem of an undumpable signer): needs root")
	}
	work, keys := t.TempDir(), t.TempDir()
	ca := filepath.Join(keys, "ca")
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "lab CA", "-f", ca).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "keys", "provision", "--ca", ca, "--count", "2", "--first-serial", "500", "--out", filepath.Join(keys, "out")).CombinedOutput(); err != nil {
		t.Fatalf("keys provision: %v\n%s", err, out)
	}
	// Installed as `docker cp` would: the pool's files into the state
	// volume's session-keys/pool/.
	pool := filepath.Join(work, "aptl-dev", "state", sessionkey.Dir, sessionkey.PoolDir)
	if err := os.MkdirAll(pool, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(keys, "out", sessionkey.PoolDir))
	if err != nil || len(entries) != 4 {
		t.Fatalf("the provisioned pool holds %d files (%v), want 2 keys and 2 certificates", len(entries), err)
	}
	var seed []byte
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(keys, "out", sessionkey.PoolDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(e.Name(), "00000000000000000500.key") && strings.HasSuffix(e.Name(), ".key") {
			priv, err := gossh.ParseRawPrivateKey(b)
			if err != nil {
				t.Fatal(err)
			}
			seed = priv.(*ed25519.PrivateKey).Seed()
		}
		if err := os.WriteFile(filepath.Join(pool, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if seed == nil {
		t.Fatal("no key of serial 500 was provisioned")
	}

	ls := startLiveServerIn(t, bin, work, "--session-keys", "pool")
	c, err := gossh.Dial("tcp", ls.addr, ls.config)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	sess.Setenv(vocab.HeaderSessionID, "keyed-1")
	stdin, _ := sess.StdinPipe()
	stdout, _ := sess.StdoutPipe()
	if err := sess.Start("cat"); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("hello\n"))
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("the session echoes %q, %v", line, err)
	}
	serve := ls.pid()
	// The session's signer, and the next session's, readied ahead
	// (sessionkey.Pool.Take): the first holds the seed.
	signers := childrenNamed(t, serve, "session-signer")
	holding := 0
	for _, pid := range signers {
		if memoryHolds(t, pid, seed) {
			holding++
		}
	}
	if len(signers) == 0 || holding != 1 {
		t.Fatalf("of serve's %d session-signer children during the session, %d hold the seed; want exactly one (else the scan proves nothing)", len(signers), holding)
	}
	if memoryHolds(t, serve, seed) {
		t.Error("serve's own memory holds the session key's seed during the session; only its signer child should")
	}
	stdin.Close()
	sess.Wait()
	dir := ls.sessionDir("_unbound", "keyed-1")
	if !testutil.WaitUntil(func() bool {
		_, err := os.Stat(filepath.Join(dir, vocab.ManifestSigFile))
		return err == nil
	}) {
		t.Fatalf("no manifest in %s after the session closed", dir)
	}

	for _, pid := range childrenNamed(t, serve, "session-signer") {
		if memoryHolds(t, pid, seed) {
			t.Errorf("serve's session-signer %d holds the sealed session's key", pid)
		}
	}
	if len(childrenNamed(t, serve, "session-signer")) > 1 {
		t.Errorf("serve runs more than the one spare session-signer after the session was sealed")
	}
	if memoryHolds(t, serve, seed) {
		t.Error("serve's memory holds the session key's seed after the session was sealed")
	}
	filepath.Walk(work, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			// The key file of serial 500 by its name, or any file by the
			// seed's bytes (the other key, 501, waits in the pool).
			if b, err := os.ReadFile(path); err == nil && (bytes.Contains(b, seed) || strings.Contains(filepath.Base(path), "00000000000000000500.key")) {
				t.Errorf("%s holds the session key after the session was sealed", path)
			}
		}
		return nil
	})

	// The stock check, with the CA alone: the manifest's signature by the
	// session's certificate, at the session's start.
	caPub, err := os.ReadFile(ca + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(keys, "allowed_signers")
	if err := os.WriteFile(allowed, []byte(vocab.SignerPrincipal+" cert-authority "+string(caPub)), 0o600); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, vocab.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	// -O verify-time is the session's start, the open record's time.
	log, err := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	var open integrity.Record
	if err := json.Unmarshal(log[:bytes.IndexByte(log, '\n')], &open); err != nil {
		t.Fatal(err)
	}
	start := open.Time.UTC().Format("20060102150405")
	cmd := exec.Command(keygen, "-Y", "verify", "-f", allowed, "-I", vocab.SignerPrincipal, "-n", integrity.ManifestNamespace,
		"-s", filepath.Join(dir, vocab.ManifestSigFile), "-O", "verify-time="+start)
	cmd.Stdin = bytes.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -Y verify of the manifest with the CA: %v\n%s", err, out)
	}
	// The head as export gives it, with the session's certificate, which
	// ssh-keygen -L reads: serial and window as provisioned.
	head := t.TempDir()
	if out, err := exec.Command(bin, "export", "--format", "head", "--out", head, dir).CombinedOutput(); err != nil {
		t.Fatalf("export --format head: %v\n%s", err, out)
	}
	out, err := exec.Command(keygen, "-L", "-f", filepath.Join(head, "head-cert.pub")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Serial: 500") || !strings.Contains(string(out), sessionkey.KeyID(500)) {
		t.Fatalf("ssh-keygen -L of the exported certificate: %v\n%s", err, out)
	}
	msg, err := os.ReadFile(filepath.Join(head, "head.txt"))
	if err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(keygen, "-Y", "verify", "-f", allowed, "-I", vocab.SignerPrincipal, "-n", integrity.HeadNamespace,
		"-s", filepath.Join(head, "head.sig"), "-O", "verify-time="+start)
	cmd.Stdin = bytes.NewReader(msg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -Y verify of the head with the CA: %v\n%s", err, out)
	}
}

// pid is the server's process id.
func (ls *liveServer) pid() int { return ls.srv.(*os.Process).Pid }

// childrenNamed lists parent's child processes whose command line's
// second word is sub (the sidecar's subcommand).
func childrenNamed(t *testing.T, parent int, sub string) []int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, stat := range procs {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: the comm may hold spaces.
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(parent) {
			continue
		}
		dir := filepath.Dir(stat)
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 && args[1] == sub {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			found = append(found, pid)
		}
	}
	return found
}

// memoryHolds reports whether pattern is anywhere in pid's readable
// memory (/proc/<pid>/maps and mem).
func memoryHolds(t *testing.T, pid int, pattern []byte) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for line := range strings.SplitSeq(strings.TrimSpace(string(maps)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[1][0] != 'r' || (len(fields) > 5 && fields[5] == "[vvar]") {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end-start > 1<<30 {
			continue
		}
		buf := make([]byte, end-start)
		n, _ := mem.ReadAt(buf, int64(start))
		if bytes.Contains(buf[:n], pattern) {
			return true
		}
	}
	return false
}
