package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// TestDiskStatesEndToEnd: the real sidecar serves in a network namespace
// of its own (so its pcap witness captures that namespace's packets),
// its capture root a 64 MiB tmpfs with marks of percents only (low below
// 30%, critical below 10%, ok again at 50%). A session is open while a
// filler takes the volume low, then critical, and is removed again:
//   - each transition is a disk record in the session's chain, a log
//     line, and the readiness file's disk key, which health prints while
//     it stays passing;
//   - the UDP packets sent while the volume was not ok are a
//     pcap-disk-low gap (first, last, count), not stored;
//   - the transcript holds every line sent in every state;
//   - a session started while critical is refused with a line naming
//     the disk, in the client's stderr and the log;
//   - the record is finalized and verifies ok.
func TestDiskStatesEndToEnd(t *testing.T) {
	t.Parallel() // see parallel_test.go
	if os.Geteuid() != 0 {
		t.Skip("needs root: a tmpfs capture root, a network namespace, and CAP_NET_RAW for the pcap witness")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2) to make a network namespace")
	}
	ns := fmt.Sprintf("aptldisk%d", os.Getpid()%100000)
	testutil.AddNetns(t, ns)
	root := testutil.SmallVolume(t, "64m")
	bin := buildCommand(t)
	work := t.TempDir()
	state, ready := filepath.Join(work, "state"), filepath.Join(work, "ready")
	const addr = "127.0.0.1:2298"
	srv := exec.Command("ip", "netns", "exec", ns, bin, "serve", "--listen", addr, "--root", root,
		"--state-dir", state, "--ready-file", ready, "--users", "root",
		"--disk-low-percent", "30", "--disk-critical-percent", "10", "--disk-resume-percent", "50",
		"--disk-low-mb", "0", "--disk-critical-mb", "0", "--disk-resume-mb", "0")
	logs := &testutil.LockedBuffer{}
	srv.Stdout, srv.Stderr = logs, logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := testutil.Stop(srv, testutil.StopGrace); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("sidecar output:\n%s", logs.String())
		}
	})
	waitFor(t, 20*time.Second, "the readiness file", func() bool { return diskReadiness(ready)["listen"] == "ok" })
	if r := diskReadiness(ready); r["pcap"] != "ok" || r[vocab.ReadyKeyDisk] != vocab.DiskOK {
		t.Fatalf("readiness %v: want pcap=ok and disk=ok to start", r)
	}
	key, err := os.ReadFile(filepath.Join(state, "client_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	hostKey := readHostKey(t, state)

	// The session: cat echoes each line to its stdout, so every line is
	// in the transcript once the client has read it back.
	c := diskDial(t, ns, addr, signer)
	cat := startCat(t, c, map[string]string{"APTL_RUN_ID": "disk", "APTL_SESSION_ID": "states"})
	say := cat.say
	dir := filepath.Join(root, "disk", "states")
	waitFor(t, 10*time.Second, "the session's open record", func() bool {
		_, err := os.Stat(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
		return err == nil
	})
	say("line while ok")
	diskSendUDP(t, ns, 5)

	health := func(want string) {
		t.Helper()
		out, err := exec.Command("ip", "netns", "exec", ns, bin, "health", "--ready-file", ready).CombinedOutput()
		if err != nil || !strings.Contains(string(out), " disk="+want) {
			t.Errorf("health on a %s volume: %v: %s (want passing, disk=%s)", want, err, out, want)
		}
	}
	waitDisk := func(want string) {
		t.Helper()
		waitFor(t, 10*time.Second, "readiness disk="+want, func() bool { return diskReadiness(ready)[vocab.ReadyKeyDisk] == want })
	}

	// Low: 20% free. The witnesses stop; the transcript goes on.
	filler := filepath.Join(root, "filler")
	diskFillTo(t, root, filler, 20)
	waitDisk(vocab.DiskLow)
	const lowPackets = 20
	diskSendUDP(t, ns, lowPackets)
	say("line while low")
	health(vocab.DiskLow)

	// Critical: 5% free. New sessions are refused naming the disk.
	diskFillTo(t, root, filler, 5)
	waitDisk(vocab.DiskCritical)
	say("line while critical")
	health(vocab.DiskCritical)
	refused := rawExec(t, diskDial(t, ns, addr, signer), map[string]string{"APTL_RUN_ID": "disk", "APTL_SESSION_ID": "refused"}, "echo never")
	if !refused.refused() || !strings.Contains(refused.stderr, "aptl-kali-capture: "+broker.RefusalDiskCritical) {
		t.Errorf("a session on a critical volume: %+v, want refused with %q", refused, broker.RefusalDiskCritical)
	}
	if _, err := os.Stat(filepath.Join(root, "disk", "refused")); !os.IsNotExist(err) {
		t.Errorf("the refused session left a folder: %v", err)
	}

	// Freed: ok again, the witnesses store again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitDisk(vocab.DiskOK)
	say("line while ok again")
	diskSendUDP(t, ns, 5)
	health(vocab.DiskOK)
	if err := cat.end(); err != nil {
		t.Fatalf("session: %v", err)
	}
	waitFor(t, 10*time.Second, "the close record", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
		return bytes.Contains(b, []byte(`"type":"close"`))
	})

	rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{hostKey}}, evidence.Options{})
	if rep.Status != evidence.StatusOK || !rep.Finalized || len(rep.Anomalies) != 0 {
		t.Fatalf("status %s finalized %v anomalies %v, want ok", rep.Status, rep.Finalized, rep.Anomalies)
	}
	var transitions []string
	var lowGaps []map[string]string
	for _, r := range diskLogRecords(t, dir) {
		switch {
		case r.Type == vocab.TypeDisk:
			transitions = append(transitions, r.Attrs[vocab.AttrDiskFrom]+">"+r.Attrs[vocab.AttrDiskState])
		case r.Type == vocab.TypeGap && r.Attrs[vocab.AttrReason] == vocab.GapPcapDiskLow:
			lowGaps = append(lowGaps, r.Attrs)
		}
	}
	t.Logf("disk records %v; pcap-disk-low gaps %v", transitions, lowGaps)
	if want := []string{"ok>low", "low>critical", "critical>ok"}; !slices.Equal(transitions, want) {
		t.Errorf("disk records %v, want %v", transitions, want)
	}
	var notStored int
	for _, g := range lowGaps {
		n, _ := strconv.Atoi(g[vocab.AttrCount])
		notStored += n
		if g[vocab.AttrStream] != vocab.StreamPcap || g[vocab.AttrFirst] == "" || g[vocab.AttrLast] == "" {
			t.Errorf("pcap-disk-low gap %v lacks its stream or window", g)
		}
	}
	if notStored < lowPackets {
		t.Errorf("pcap-disk-low gaps %v count %d packets, want at least the %d sent while low", lowGaps, notStored, lowPackets)
	}
	if !slices.ContainsFunc(rep.Gaps, func(g evidence.Gap) bool { return g.Reason == vocab.GapPcapDiskLow }) {
		t.Errorf("verify reports gaps %+v, want the pcap-disk-low one", rep.Gaps)
	}
	ts := mustRead(t, filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile))
	for _, l := range []string{"line while ok", "line while low", "line while critical", "line while ok again"} {
		if !bytes.Contains(ts, []byte(l+"\n")) {
			t.Errorf("the typescript lacks %q", l)
		}
	}
	out := logs.String()
	for _, want := range []string{`msg="capture volume is low;`, `msg="capture volume is critical;`, `msg="capture volume is ok again;`,
		`msg="session refused"`, broker.RefusalDiskCritical} {
		if !strings.Contains(out, want) {
			t.Errorf("the sidecar's log lacks %q", want)
		}
	}
	for _, l := range []string{"line while", "never"} {
		if strings.Contains(out, l) {
			t.Errorf("the sidecar's log holds session bytes %q", l)
		}
	}
}

// diskReadiness is the readiness file's key=value lines.
func diskReadiness(path string) map[string]string {
	b, _ := os.ReadFile(path)
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// diskFillTo grows filler until the volume at root has pct percent of its
// size free.
func diskFillTo(t *testing.T, root, filler string, pct int64) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		t.Fatal(err)
	}
	size, free := int64(st.Blocks)*st.Bsize, int64(st.Bavail)*st.Bsize
	grow := free - size*pct/100
	if grow <= 0 {
		t.Fatalf("the volume has %d of %d bytes free already, below %d%%", free, size, pct)
	}
	f, err := os.OpenFile(filler, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, grow)); err != nil {
		t.Fatal(err)
	}
}

// diskDial logs in to the sidecar in ns.
func diskDial(t *testing.T, ns, addr string, signer gossh.Signer) *gossh.Client {
	t.Helper()
	var conn net.Conn
	testutil.InNetns(t, ns, func() (err error) {
		conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	cfg := &gossh.ClientConfig{User: "root", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}
	cc, chans, reqs, err := gossh.NewClientConn(conn, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := gossh.NewClient(cc, chans, reqs)
	t.Cleanup(func() { c.Close() })
	return c
}

// diskSendUDP sends n datagrams to the loopback of ns, which the
// sidecar's pcap witness captures for its open sessions.
func diskSendUDP(t *testing.T, ns string, n int) {
	t.Helper()
	testutil.InNetns(t, ns, func() error {
		// Unconnected: no receiver listens, and the port unreachable the
		// kernel answers must not fail the next datagram.
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer c.Close()
		to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9999}
		for i := range n {
			if _, err := c.WriteTo([]byte("disk-state-probe "+strconv.Itoa(i)), to); err != nil {
				return err
			}
		}
		return nil
	})
	// The capture reaches the session's writer asynchronously.
	time.Sleep(200 * time.Millisecond)
}

// diskLogRecords are the records of a session's integrity log.
func diskLogRecords(t *testing.T, dir string) []integrity.Record {
	t.Helper()
	var rs []integrity.Record
	for _, l := range logLines(mustRead(t, filepath.Join(dir, vocab.PTYDir, vocab.LogFile))) {
		var r integrity.Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}
