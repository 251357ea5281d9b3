package tests

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/s3test"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestServeShipsASessionAndReadinessSaysBehindDuringAnOutage: serve with
// --ship-bucket against versitygw, one session by x/crypto/ssh; with the
// gateway stopped the readiness file says ship=behind and its lag, with
// it back ship=ok and no bytes behind; after serve stops, verify
// --shipped of the session folder finds nothing.
func TestServeShipsASessionAndReadinessSaysBehindDuringAnOutage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: serve's local adapter logs in as root")
	}
	g := s3test.Start(t, s3test.Options{})
	bin := buildCommand(t)
	work := t.TempDir()
	state, ready, root := filepath.Join(work, "state"), filepath.Join(work, "ready"), filepath.Join(work, "captures")
	shipArgs := []string{"--ship-bucket", g.Bucket, "--ship-endpoint", g.Endpoint, "--ship-region", g.Region, "--ship-path-style", "--ship-prefix", shipPrefix}
	srv := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--root", root, "--state-dir", state,
		"--ready-file", ready, "--users", "root", "--classes", "pty"}, shipArgs...)...)
	srv.Env = append(os.Environ(), g.Env()...)
	logs := &testutil.LockedBuffer{}
	srv.Stdout, srv.Stderr = logs, logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			testutil.Stop(srv, testutil.StopGrace)
		}
		if t.Failed() {
			t.Logf("sidecar output:\n%s", logs.String())
		}
	})
	waitFor(t, 20*time.Second, "the readiness file", func() bool { return diskReadiness(ready)["ship"] == "ok" })
	signer, err := gossh.ParsePrivateKey(mustRead(t, filepath.Join(state, "client_ed25519")))
	if err != nil {
		t.Fatal(err)
	}
	c, err := gossh.Dial("tcp", diskReadiness(ready)["listen_addr"], &gossh.ClientConfig{User: "root", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.FixedHostKey(readHostKey(t, state)), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	sess.Setenv("APTL_RUN_ID", "run-ship")
	sess.Setenv("APTL_SESSION_ID", "served")
	stdin, _ := sess.StdinPipe()
	stdout, _ := sess.StdoutPipe()
	if err := sess.Start("cat"); err != nil {
		t.Fatal(err)
	}
	var echoed bytes.Buffer
	say := func(line string) {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
		readUntil(t, stdout, &echoed, line+"\n", 10*time.Second)
	}
	say("before the outage")
	waitFor(t, 10*time.Second, "the session's first segments", func() bool {
		return len(objects(t, g, shipPrefix+"segments/run-ship/served/")) >= 2
	})

	g.Stop()
	// Behind from the first failed request, and the lag grows with the
	// outage: past 5 s of it, the file says so.
	var behind map[string]string
	for i := 0; behind == nil && i < 40; i++ {
		say("during the outage " + strconv.Itoa(i))
		r := diskReadiness(ready)
		if r["ship"] == "failing" {
			t.Fatalf("an outage is not a refusal: %v", r)
		}
		if lag, _ := strconv.Atoi(r["ship_lag_seconds"]); r["ship"] == "behind" && lag >= 5 && r["ship_lag_bytes"] != "0" {
			behind = r
		}
		time.Sleep(500 * time.Millisecond)
	}
	if behind == nil {
		t.Fatalf("readiness never said ship=behind with a lag of 5 s during a 20 s outage: %v", diskReadiness(ready))
	}
	out, _ := exec.Command(bin, "health", "--ready-file", ready).CombinedOutput()
	if !strings.Contains(string(out), "ship=behind") {
		t.Errorf("health does not state ship=behind: %s", out)
	}
	g.Start()
	waitFor(t, 30*time.Second, "readiness ship=ok after the outage", func() bool {
		r := diskReadiness(ready)
		return r["ship"] == "ok" && r["ship_lag_bytes"] == "0"
	})
	say("after the outage")
	stdin.Close()
	sess.Wait()
	c.Close()
	if err := testutil.Stop(srv, testutil.StopGrace); err != nil {
		t.Fatal(err)
	}
	stopped = true

	verify := exec.Command(bin, append([]string{"verify", "--key", filepath.Join(state, "ssh_host_ed25519_key.pub"), "--shipped"},
		append(shipArgs, filepath.Join(root, "run-ship", "served"))...)...)
	verify.Env = append(os.Environ(), g.Env()...)
	vout, err := verify.CombinedOutput()
	if err != nil || !strings.Contains(string(vout), "findings=0") {
		t.Fatalf("verify --shipped: %v\n%s", err, vout)
	}
	t.Logf("%s", vout)
}
