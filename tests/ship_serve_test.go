package tests

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/s3test"
)

// TestServeShipsASessionAndReadinessSaysBehindDuringAnOutage: serve with
// --ship-bucket against versitygw, one session by x/crypto/ssh; with the
// gateway stopped the readiness file says ship=behind and its lag, with
// it back ship=ok and no bytes behind; after serve stops, verify
// --shipped of the session folder finds nothing.
func TestServeShipsASessionAndReadinessSaysBehindDuringAnOutage(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	g.SetEnv(t) // serve's SDK reads the standard AWS environment
	bin := buildCommand(t)
	work := t.TempDir()
	ready := filepath.Join(work, "ready")
	shipArgs := []string{"--ship-bucket", g.Bucket, "--ship-endpoint", g.Endpoint, "--ship-region", g.Region, "--ship-path-style", "--ship-prefix", shipPrefix}
	ls := startLiveServerIn(t, bin, work, append([]string{"--classes", "pty"}, shipArgs...)...)
	waitFor(t, 20*time.Second, "readiness ship=ok", func() bool { return diskReadiness(ready)["ship"] == "ok" })
	c, err := gossh.Dial("tcp", ls.addr, ls.config)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cat := startCat(t, c, map[string]string{"APTL_RUN_ID": "run-ship", "APTL_SESSION_ID": "served"})
	cat.say("before the outage")
	waitFor(t, 10*time.Second, "the session's first segments", func() bool {
		return len(g.Objects(t, shipPrefix+"segments/run-ship/served/")) >= 2
	})

	g.Stop()
	// Behind from the first failed request, and the lag grows with the
	// outage: past 5 s of it, the file says so.
	var behind map[string]string
	for i := 0; behind == nil && i < 40; i++ {
		cat.say("during the outage " + strconv.Itoa(i))
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
	cat.say("after the outage")
	cat.end()
	c.Close()
	if err := ls.srv.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ls.wait()

	verify := exec.Command(bin, append([]string{"verify", "--key", filepath.Join(work, "aptl-dev", "state", "ssh_host_ed25519_key.pub"), "--shipped"},
		append(shipArgs, ls.sessionDir("run-ship", "served"))...)...)
	vout, err := verify.CombinedOutput()
	if err != nil || !strings.Contains(string(vout), "findings=0") {
		t.Fatalf("verify --shipped: %v\n%s\nsidecar output:\n%s", err, vout, ls.logs.String())
	}
	t.Logf("%s", vout)
}
