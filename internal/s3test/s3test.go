// Package s3test starts a real S3 server for tests: versitygw in its posix
// mode, on a loopback port, with one bucket (Object Lock enabled when asked),
// and runs the stock aws CLI against it. Tests only.
//
// The S3 suites skip, saying which part is missing, where the versitygw
// binary or the aws CLI is absent: the binary is $APTL_VERSITYGW, else
// versitygw in PATH (.ci/run builds v1.8.0 and caches it by version).
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Region is the gateway's region; versitygw's default, named so that the
// SDK's and the CLI's requests are signed for the same one.
const Region = "us-east-1"

// Options choose the bucket the gateway starts with.
type Options struct {
	// ObjectLock makes the bucket with Object Lock enabled (which also
	// turns versioning on, as on AWS).
	ObjectLock bool
}

// Gateway is a running versitygw with one bucket.
type Gateway struct {
	Endpoint  string // http://127.0.0.1:PORT
	Region    string
	AccessKey string
	SecretKey string
	Bucket    string

	t       testing.TB
	bin     string
	addr    string
	dataDir string
	verDir  string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// startWait bounds how long the gateway may take to accept connections;
// stopWait how long it may take to exit after SIGTERM.
const (
	startWait = 15 * time.Second
	stopWait  = 10 * time.Second
	cliWait   = 60 * time.Second
)

// Binary returns the versitygw binary's path, or why there is none.
func Binary() (string, error) {
	if p := os.Getenv("APTL_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("APTL_VERSITYGW=%s: %v", p, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("versitygw")
	if err != nil {
		return "", fmt.Errorf("no versitygw binary: set APTL_VERSITYGW or put versitygw in PATH (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0; .ci/run builds and caches it)")
	}
	return p, nil
}

// Start starts a gateway for the test and stops it at the test's end. It
// skips the test, saying what is missing, where versitygw or the aws CLI
// is absent.
func Start(t testing.TB, opts Options) *Gateway {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Skipf("S3 suite skipped: %v", err)
	}
	if _, err := exec.LookPath("aws"); err != nil {
		t.Skip("S3 suite skipped: no aws CLI in PATH (Debian's awscli package)")
	}
	dir := t.TempDir()
	g := &Gateway{
		Region:    Region,
		AccessKey: "aptltest" + randomHex(t, 6),
		SecretKey: randomHex(t, 20),
		Bucket:    "aptl-evidence",
		t:         t,
		bin:       bin,
		addr:      freeLoopbackAddr(t),
		dataDir:   filepath.Join(dir, "data"),
		verDir:    filepath.Join(dir, "versions"),
		logPath:   filepath.Join(dir, "versitygw.log"),
	}
	g.Endpoint = "http://" + g.addr
	for _, d := range []string{g.dataDir, g.verDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(g.Stop)
	g.Start()
	args := []string{"s3api", "create-bucket", "--bucket", g.Bucket}
	if opts.ObjectLock {
		args = append(args, "--object-lock-enabled-for-bucket")
	}
	g.AWS(t, args...)
	return g
}

// Start starts the gateway again on the same port with the same data
// (after Stop: an outage that ends), and waits until it accepts
// connections.
func (g *Gateway) Start() {
	g.t.Helper()
	if g.cmd != nil {
		g.t.Fatal("s3test: gateway already running")
	}
	logf, err := os.OpenFile(g.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		g.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(g.bin, "--access", g.AccessKey, "--secret", g.SecretKey,
		"--port", g.addr, "--region", g.Region, "--quiet",
		"posix", "--versioning-dir", g.verDir, g.dataDir)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The gateway dies with the test binary even when the test is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		g.t.Fatalf("s3test: start versitygw: %v", err)
	}
	g.cmd, g.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) { cmd.Wait(); close(exited) }(g.exited)
	deadline := time.Now().Add(startWait)
	for {
		c, err := net.DialTimeout("tcp", g.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-g.exited:
			g.t.Fatalf("s3test: versitygw exited at start; its log:\n%s", g.log())
		default:
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("s3test: versitygw did not accept connections on %s within %v; its log:\n%s", g.addr, startWait, g.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the gateway (SIGTERM, then SIGKILL after stopWait). The data
// stays, for Start.
func (g *Gateway) Stop() {
	if g.cmd == nil {
		return
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(stopWait):
		g.cmd.Process.Kill()
		<-g.exited
	}
	g.cmd = nil
}

// Env is the standard AWS environment for this gateway's credentials and
// region, for the aws CLI and the SDK's default configuration; no shared
// config or credentials file of the machine is read.
func (g *Gateway) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + g.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + g.SecretKey,
		"AWS_DEFAULT_REGION=" + g.Region,
		"AWS_REGION=" + g.Region,
		"AWS_CONFIG_FILE=" + os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// SetEnv sets Env in the test's environment (t.Setenv), for code under
// test that loads the SDK's default configuration.
func (g *Gateway) SetEnv(t testing.TB) {
	for _, kv := range g.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// AWS runs the stock aws CLI against the gateway and returns its stdout;
// a failure fails the test with the CLI's stderr.
func (g *Gateway) AWS(t testing.TB, args ...string) []byte {
	t.Helper()
	out, err := g.TryAWS(args...)
	if err != nil {
		t.Fatalf("aws %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// TryAWS runs the aws CLI like AWS and returns its error, with the CLI's
// stderr in it, for the calls a test expects to be refused.
func (g *Gateway) TryAWS(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cliWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "aws", append([]string{"--endpoint-url", g.Endpoint, "--output", "json"}, args...)...)
	cmd.Env = append(os.Environ(), g.Env()...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Objects lists the objects under prefix with the aws CLI: each key and
// its size.
func (g *Gateway) Objects(t testing.TB, prefix string) map[string]int64 {
	t.Helper()
	var out struct {
		Contents []struct {
			Key  string
			Size int64
		}
	}
	if b := g.AWS(t, "s3api", "list-objects-v2", "--bucket", g.Bucket, "--prefix", prefix); len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("aws s3api list-objects-v2: %v: %s", err, b)
		}
	}
	m := map[string]int64{}
	for _, o := range out.Contents {
		m[o.Key] = o.Size
	}
	return m
}

func (g *Gateway) log() string {
	b, _ := os.ReadFile(g.logPath)
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	return string(b)
}

// freeLoopbackAddr returns a loopback address whose port was free a moment
// ago; the gateway binds it itself.
func freeLoopbackAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
