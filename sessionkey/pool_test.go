package sessionkey

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// The test binary is its own signer child when asked, as the sidecar's
// command is through its hidden session-signer subcommand.
func TestMain(m *testing.M) {
	if os.Getenv("APTL_SESSIONKEY_TEST_SIGNER") == "1" {
		if err := ServeSigner(os.NewFile(3, "key"), os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func testCommand() SignerCommand {
	return SignerCommand{Path: os.Args[0], Env: []string{"APTL_SESSIONKEY_TEST_SIGNER=1"}}
}

// provisioned makes a pool of n keys under a fresh state folder, valid
// from an hour ago for a day, and returns the folder and the CA.
func provisioned(t *testing.T, n int, first uint64) (string, gossh.Signer) {
	t.Helper()
	ca := testutil.NewSigner()
	state := t.TempDir()
	now := time.Now()
	if _, _, err := Provision(filepath.Join(state, Dir), Provisioning{CA: ca, Count: n, FirstSerial: first, ValidAfter: now.Add(-time.Hour), ValidBefore: now.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return state, ca
}

func openPool(t *testing.T, state string) *Pool {
	t.Helper()
	p, err := Open(state, testCommand())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func needKeygen(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Skip("ssh-keygen (openssh-client) is not installed: the certificates cannot be checked with the stock tool here")
	}
	return bin
}

// A taken key signs through its child; the signature carries the
// certificate, and stock ssh-keygen verifies it with the CA alone, at the
// session's time; the certificate reads as provisioned with -L.
func TestTakenKeySignsAsTheCertificateSays(t *testing.T) {
	keygen := needKeygen(t)
	state, ca := provisioned(t, 2, 41)
	p := openPool(t, state)
	k, err := p.Take()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Destroy()
	if k.Serial() != 41 {
		t.Fatalf("took serial %d, want the lowest, 41", k.Serial())
	}
	msg := []byte("head of a session\n")
	sig, err := integrity.SignSSHSIG(k, integrity.HeadNamespace, msg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	allowed, sigFile, certFile := filepath.Join(dir, "allowed_signers"), filepath.Join(dir, "head.sig"), filepath.Join(dir, "cert.pub")
	mustWrite(t, allowed, []byte(AllowedSigners(ca.PublicKey())))
	mustWrite(t, sigFile, []byte(sig))
	mustWrite(t, certFile, gossh.MarshalAuthorizedKey(k.PublicKey()))
	verify := func(at time.Time) error {
		cmd := exec.Command(keygen, "-Y", "verify", "-f", allowed, "-I", vocab.SignerPrincipal, "-n", integrity.HeadNamespace, "-s", sigFile, "-O", "verify-time="+at.Format("20060102150405"))
		cmd.Stdin = bytes.NewReader(msg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return errors.New(string(out))
		}
		return nil
	}
	if err := verify(time.Now()); err != nil {
		t.Fatalf("ssh-keygen -Y verify with the CA: %v", err)
	}
	if err := verify(time.Now().Add(48 * time.Hour)); err == nil {
		t.Error("ssh-keygen accepted the signature at a time outside the certificate's window")
	}
	out, err := exec.Command(keygen, "-L", "-f", certFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Serial: 41") || !strings.Contains(string(out), KeyID(41)) || !strings.Contains(string(out), vocab.SignerPrincipal) {
		t.Fatalf("ssh-keygen -L: %v\n%s", err, out)
	}
}

// Destroy ends the child and removes the key: no file of the pool holds
// it and no process signs with it.
func TestDestroyLeavesNoKey(t *testing.T) {
	state, _ := provisioned(t, 1, 7)
	p := openPool(t, state)
	k, err := p.Take()
	if err != nil {
		t.Fatal(err)
	}
	pid := k.cmd.Process.Pid
	keyFile := k.file
	// Its own process group: a ^C meant for serve does not end it first.
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid == syscall.Getpgrp() {
		t.Errorf("the signer %d is in process group %d (%v), serve's own", pid, pgid, err)
	}
	if err := k.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the signer child %d is still there after Destroy (kill 0: %v)", pid, err)
	}
	if _, err := os.Lstat(keyFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the key file is still there after Destroy (lstat: %v)", err)
	}
	for _, sub := range []string{PoolDir, ActiveDir, RefusedDir} {
		if names := listNames(t, filepath.Join(state, Dir, sub)); len(names) != 0 {
			t.Errorf("%s/ holds %v after the only key was destroyed", sub, names)
		}
	}
	if _, err := k.Sign(nil, []byte("x")); err == nil {
		t.Error("a destroyed key signed")
	}
}

// Each key is used once: the pool runs empty, and a key put back after
// use is refused for its serial, after a restart too (the ledger).
func TestEachKeyIsUsedOnce(t *testing.T) {
	state, _ := provisioned(t, 2, 100)
	p := openPool(t, state)
	kept := map[string][]byte{} // the taken keys' files, as a thief or a careless restore keeps them
	var taken []uint64
	for range 2 {
		k, err := p.Take()
		mustOK(t, err)
		taken = append(taken, k.Serial())
		for _, name := range []string{keyName(k.Serial()), certName(k.Serial())} {
			b, err := os.ReadFile(filepath.Join(state, Dir, ActiveDir, name))
			mustOK(t, err)
			kept[name] = b
		}
		mustOK(t, k.Destroy())
	}
	if taken[0] != 100 || taken[1] != 101 {
		t.Fatalf("taken %v, want 100 then 101", taken)
	}
	if _, err := p.Take(); !errors.Is(err, ErrPoolEmpty) {
		t.Fatalf("Take of an empty pool = %v, want ErrPoolEmpty", err)
	}
	for _, restart := range []bool{false, true} {
		for name, b := range kept {
			mustWrite(t, filepath.Join(state, Dir, PoolDir, name), b)
		}
		q := p
		if restart {
			q = openPool(t, state)
		}
		var refused []string
		q.OnRefuse = func(serial uint64, reason string) {
			refused = append(refused, strconv.FormatUint(serial, 10)+": "+reason)
		}
		if _, err := q.Take(); !errors.Is(err, ErrPoolEmpty) {
			t.Fatalf("restart %v: Take of a pool of used keys = %v, want ErrPoolEmpty", restart, err)
		}
		if len(refused) != 2 || !strings.Contains(refused[0], "used before") || !strings.HasSuffix(refused[0], "destroyed") {
			t.Fatalf("restart %v: refused %v, want both keys destroyed for their used serials", restart, refused)
		}
		// A copy of a used key could re-sign its session: none is kept.
		for _, sub := range []string{PoolDir, ActiveDir, RefusedDir} {
			if names := listNames(t, filepath.Join(state, Dir, sub)); len(names) != 0 {
				t.Fatalf("restart %v: %s/ holds %v after the used keys were put back", restart, sub, names)
			}
		}
	}
}

// A key whose certificate is another key's, or outside its window, is set
// aside, not used.
func TestUnusableKeysAreSetAside(t *testing.T) {
	state, _ := provisioned(t, 3, 1)
	pool := filepath.Join(state, Dir, PoolDir)
	// Key 1 gets key 2's certificate (serial and all): its name and the
	// certificate's serial disagree. Key 2 gets key 3's key file: its
	// certificate certifies another key.
	copyFile(t, filepath.Join(pool, certName(2)), filepath.Join(pool, certName(1)))
	copyFile(t, filepath.Join(pool, keyName(3)), filepath.Join(pool, keyName(2)))
	mustOK(t, os.Remove(filepath.Join(pool, keyName(3))))
	mustOK(t, os.Remove(filepath.Join(pool, certName(3))))
	p := openPool(t, state)
	var refused []string
	p.OnRefuse = func(serial uint64, reason string) { refused = append(refused, reason) }
	_, err := p.Take()
	if err == nil || !strings.Contains(err.Error(), "not the certificate's") {
		t.Fatalf("Take = %v, want key 2 refused by its signer's public key", err)
	}
	if len(refused) != 2 || !strings.Contains(refused[0], "its file's name says 1") {
		t.Fatalf("refused %v", refused)
	}
	if _, err := p.Take(); !errors.Is(err, ErrPoolEmpty) {
		t.Fatalf("second Take = %v, want ErrPoolEmpty", err)
	}
	// Key 1, never activated, is set aside for the operator; key 2 was
	// activated (in the ledger) and is destroyed, never kept.
	if names := listNames(t, filepath.Join(state, Dir, RefusedDir)); len(names) != 2 || names[0] != keyName(1) {
		t.Errorf("refused/ holds %v, want key 1 and its certificate", names)
	}
	for _, sub := range []string{PoolDir, ActiveDir} {
		if names := listNames(t, filepath.Join(state, Dir, sub)); len(names) != 0 {
			t.Errorf("%s/ holds %v, want key 2 destroyed", sub, names)
		}
	}

	expired, _ := provisioned(t, 1, 9)
	p = openPool(t, expired)
	p.now = func() time.Time { return time.Now().Add(48 * time.Hour) }
	if _, err := p.Take(); !errors.Is(err, ErrPoolEmpty) {
		t.Fatalf("Take of a pool whose one certificate expired = %v, want ErrPoolEmpty", err)
	}
}

// A key a stopped sidecar left in active/ signs the restart's recovery
// statement (Resume); every other key left there is destroyed.
func TestResumeAndLeftovers(t *testing.T) {
	state, _ := provisioned(t, 2, 50)
	p := openPool(t, state)
	a, err := p.Take()
	mustOK(t, err)
	b, err := p.Take()
	mustOK(t, err)
	// The sidecar stops: its children end with it, the keys stay.
	for _, k := range []*Key{a, b} {
		k.cmd.Process.Kill()
		<-k.exited
	}
	p.Close()

	q := openPool(t, state)
	r, err := q.Resume(50)
	mustOK(t, err)
	if _, err := integrity.SignSSHSIG(r, integrity.HeadNamespace, []byte("recovery")); err != nil {
		t.Fatalf("the resumed key does not sign: %v", err)
	}
	n, err := q.DestroyLeftovers()
	if err != nil || n != 1 {
		t.Fatalf("DestroyLeftovers = %d, %v; want key 51 destroyed", n, err)
	}
	mustOK(t, r.Destroy())
	if names := listNames(t, filepath.Join(state, Dir, ActiveDir)); len(names) != 0 {
		t.Errorf("active/ holds %v", names)
	}
}

func TestProvisionRefuses(t *testing.T) {
	ca := testutil.NewSigner()
	now := time.Now()
	for _, tc := range []struct {
		p    Provisioning
		want string
	}{
		{Provisioning{CA: ca, Count: 0, ValidAfter: now, ValidBefore: now.Add(time.Hour)}, "count 0"},
		{Provisioning{CA: ca, Count: 2, FirstSerial: ^uint64(0), ValidAfter: now, ValidBefore: now.Add(time.Hour)}, "do not fit"},
		{Provisioning{CA: ca, Count: 1, ValidAfter: now, ValidBefore: now}, "window ends before it starts"},
	} {
		if _, _, err := Provision(t.TempDir(), tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Provision(%+v) = %v, want %q", tc.p, err, tc.want)
		}
	}
	dir := t.TempDir()
	p := Provisioning{CA: ca, Count: 1, FirstSerial: 3, ValidAfter: now, ValidBefore: now.Add(time.Hour)}
	mustOK(t, func() error { _, _, err := Provision(dir, p); return err }())
	if _, _, err := Provision(dir, p); !errors.Is(err, os.ErrExist) {
		t.Errorf("a second provisioning of the same serial = %v, want it refused (no file replaced)", err)
	}
}

func listNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	mustOK(t, err)
	mustOK(t, os.WriteFile(to, b, 0o600))
}

func mustWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	mustOK(t, os.WriteFile(path, b, 0o600))
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
