//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// The disk-fill acceptance test (issue 25): the workload fills the capture
// volume with nothing but UDP, through the packet witness, and the record
// must not pay for it. The sizes are a small set, each with its reason.
const (
	// diskFillVolumeMiB is the capture root's tmpfs: small, so the flood
	// fills it within a second or two (the issue measured 256 MiB full in
	// about 2 s), and roomy enough for the sessions' reserves, logs and
	// a first pcap file or two, so what fills it is the witness.
	diskFillVolumeMiB = 128
	// floodDuration is how long each session floods: several times the
	// time the volume takes to fill, so most of the flood meets a full
	// disk, not only its edge; short enough for the suite.
	floodDuration = 12 * time.Second
	// floodDatagram is the UDP payload: near an Ethernet MTU, so
	// each captured packet costs about 1.4 kB of pcap.
	floodDatagram = 1400
	// floodOverfill is the factor by which the flood's bytes must exceed
	// the volume: below it the test did not fill the disk and proves
	// nothing, so it fails as not set up.
	floodOverfill = 3
	// concurrentFloods is the "16 sessions flooding at once".
	concurrentFloods = 16
	// afterFloodLines is the known block printed after the flood (seq 1
	// N): ~109 kB, more than a pipe's buffer and many recorder chunks.
	afterFloodLines = 20000
)

// wantPcapDiskGaps are the reasons of the pcap gap record that must
// account for the packets the volume could not hold: the witnesses'
// budget across sessions (a share of the volume) or, past it, the
// volume going low stops them storing, and either gap says so.
var wantPcapDiskGaps = []string{vocab.GapPcapBudget, vocab.GapPcapDiskLow}

// diskRecordType is the disk-state transition record in each open
// session's chain.
const diskRecordType = vocab.TypeDisk

// floodRun is the run id of the flood sessions.
const floodRun = "diskfill"

// Markers of the flood session's output, built by the shell ($((...)))
// so that no header quoting the command can match them.
const (
	floodSentPrefix = "FLOOD_SENT_"
	floodDoneLine   = "FLOOD_DONE_42\n"
	floodEndLine    = "FLOOD_END_42\n"
)

// TestDiskFillByPacketFlood runs the built sidecar in a network namespace
// of its own (local adapter, default classes: pcap on) with a small tmpfs
// capture root, and floods UDP from a session to a peer namespace until
// the packet witness has filled the volume several times over. The
// session's transcript after the flood must be whole, its record
// finalized and verifying (never tampered, never unfinalized), the
// packets not stored a pcap gap record; a new session afterwards, and one
// on the volume filled to its last byte, records completely or is refused
// naming the disk, and the sidecar stays up. Then the same with 16
// sessions flooding at once.
func TestDiskFillByPacketFlood(t *testing.T) {
	skipUnlessFloodLab(t, "floods for about 15 s per case")
	bin := buildCommand(t)
	for _, n := range []int{1, concurrentFloods} {
		t.Run(fmt.Sprintf("sessions=%d", n), func(t *testing.T) {
			start := time.Now()
			diskFillCase(t, bin, n)
			t.Logf("wall time of the case: %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// diskFillCase runs n flooding sessions at once on a fresh lab and volume.
func diskFillCase(t *testing.T, bin string, n int) {
	lab := newFloodLab(t, bin)
	// Every session is open and recording before any flood starts: a
	// session opened on a full volume may rightly be refused (that is
	// checkNewSession's case), and must not be mistaken for one the
	// flood cut.
	floods := make([]*floodSession, n)
	for i := range n {
		// Logins one after the other: the per-source limit on
		// unauthenticated connections must not be what the test meets.
		floods[i] = startFlood(t, lab.login(t), fmt.Sprintf("flood-%d", i), lab.peerAddr)
	}
	for _, f := range floods {
		f.waitReady(t)
	}
	for _, f := range floods {
		f.release(t)
	}
	results := make([]floodResult, n)
	var wg sync.WaitGroup
	for i, f := range floods {
		wg.Go(func() { results[i] = f.wait() })
	}
	wg.Wait()
	t.Logf("after the flood the volume has %s", lab.volumeState(t))
	// The premise: the floods together sent several times the volume
	// (every session's witness sees every flood's packets). The peer's
	// interface counts what arrived, whether or not a session lived to
	// print its own count.
	var sent, reported int
	for _, r := range results {
		if c, ok := floodSent(r.stdout); ok {
			sent += c
			reported++
		}
	}
	rx := lab.peerRxBytes(t)
	t.Logf("the peer received %d MiB on a %d MiB volume; %d of %d sessions printed their count (%d datagrams)", rx>>20, diskFillVolumeMiB, reported, n, sent)
	if rx < floodOverfill*diskFillVolumeMiB<<20 {
		t.Errorf("the peer received %d bytes, less than %d times the %d MiB volume: the test did not fill the disk and proves nothing", rx, floodOverfill, diskFillVolumeMiB)
	}

	var lost, want int
	for _, r := range results {
		want += len(expectedAfterFlood())
		t.Run(r.id, func(t *testing.T) {
			if r.err != nil {
				lost += len(expectedAfterFlood())
				t.Fatalf("the flood session: %v", r.err)
			}
			lost += checkFloodRecord(t, lab, r)
		})
	}
	t.Logf("bytes of transcript lost after the flood: %d of %d, over %d sessions (goal 0)", lost, want, n)

	lab.checkNewSession(t, "new session after the flood", "after")
	// The same on a volume full to its last byte, as while another
	// session's flood still fills it: the closed sessions' reserves,
	// released, leave room the first new session may use.
	testutil.Fill(t, lab.root)
	lab.checkNewSession(t, "new session on a volume full to the last byte", "after-full")
	lab.checkStaysUp(t)
}

// skipUnlessFloodLab skips a test of the flood lab (newFloodLab) where it
// cannot run; what says how long the test's floods take.
func skipUnlessFloodLab(t *testing.T, what string) {
	t.Helper()
	if !slowTests {
		t.Skipf("%s and mounts a tmpfs; set APTL_CAPTURE_SLOW_TESTS=1 to run it", what)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: a tmpfs capture root, network namespaces and a veth pair")
	}
	for _, tool := range []string{"ip", "perl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (Debian iproute2, perl-base)", tool)
		}
	}
}

// floodLab is the sidecar in its namespace, a peer namespace across a
// veth pair, and the volume the sidecar records on.
type floodLab struct {
	bin      string
	side     string // the sidecar's network namespace
	peer     string
	peerAddr string
	peerLink string // the peer's end of the veth pair
	root     string // the capture root: a tmpfs of diskFillVolumeMiB
	state    string
	ready    string
	listen   string // inside side
	srv      *exec.Cmd
	logs     *testutil.LockedBuffer
	config   *gossh.ClientConfig
	hostKey  gossh.PublicKey
}

// newFloodLab makes the namespaces, mounts the volume and starts `serve`
// in the sidecar's namespace, with env added to its settings; everything
// is undone at cleanup.
func newFloodLab(t *testing.T, bin string, env ...string) *floodLab {
	t.Helper()
	p := fmt.Sprintf("adf%d", os.Getpid()%100000)
	lab := &floodLab{bin: bin, side: p + "s", peer: p + "p", peerAddr: "10.233.1.2", listen: "127.0.0.1:2222"}
	for _, ns := range []string{lab.side, lab.peer} {
		testutil.AddNetns(t, ns)
	}
	veth := p + "v"
	lab.peerLink = veth + "p"
	testutil.IP(t, "link", "add", veth, "netns", lab.side, "type", "veth", "peer", "name", veth+"p", "netns", lab.peer)
	testutil.IP(t, "-n", lab.side, "addr", "add", "10.233.1.1/24", "dev", veth)
	testutil.IP(t, "-n", lab.peer, "addr", "add", lab.peerAddr+"/24", "dev", veth+"p")
	testutil.IP(t, "-n", lab.side, "link", "set", veth, "up")
	testutil.IP(t, "-n", lab.peer, "link", "set", veth+"p", "up")

	// Mounted before the sidecar starts, so its cleanup (registered
	// later, run earlier) stops the sidecar before the volume goes.
	lab.root = testutil.SmallVolume(t, strconv.Itoa(diskFillVolumeMiB)+"m")
	base := t.TempDir()
	lab.state, lab.ready = filepath.Join(base, "state"), filepath.Join(base, "ready")
	lab.logs = &testutil.LockedBuffer{}
	lab.srv = exec.Command("ip", "netns", "exec", lab.side, bin, "serve")
	lab.srv.Env = append(os.Environ(), "APTL_CAPTURE_LISTEN="+lab.listen, "APTL_CAPTURE_ROOT="+lab.root,
		"APTL_CAPTURE_STATE_DIR="+lab.state, "APTL_CAPTURE_READY_FILE="+lab.ready, "APTL_CAPTURE_USERS=root",
		"APTL_CAPTURE_LAUNCH=local", "APTL_CAPTURE_LOG_LEVEL=debug",
		// The default floors (256/64/384 MiB) exceed the test's small
		// volume, which would be low from the start: the percents alone.
		"APTL_CAPTURE_DISK_LOW_MB=0", "APTL_CAPTURE_DISK_CRITICAL_MB=0", "APTL_CAPTURE_DISK_RESUME_MB=0")
	lab.srv.Env = append(lab.srv.Env, env...)
	lab.srv.Stdout, lab.srv.Stderr = lab.logs, lab.logs
	if err := lab.srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := testutil.Stop(lab.srv, testutil.StopGrace); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("sidecar log (last 8 kB):\n%s", logTail(lab.logs.String(), 8<<10))
		}
	})
	waitFor(t, 30*time.Second, "the sidecar's readiness file", func() bool { _, err := os.Stat(lab.ready); return err == nil })
	if got := readinessKeys(t, lab.ready)["pcap"]; got != "ok" {
		t.Fatalf("readiness pcap=%q, want ok: the test's premise is a packet witness filling the volume", got)
	}
	key, err := os.ReadFile(filepath.Join(lab.state, "client_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	lab.hostKey = readHostKey(t, lab.state)
	lab.config = &gossh.ClientConfig{User: "root", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.FixedHostKey(lab.hostKey), Timeout: 10 * time.Second}
	return lab
}

func logTail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// readinessKeys returns a readiness file's key=value lines.
func readinessKeys(t *testing.T, path string) map[string]string {
	t.Helper()
	m := map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		return m
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			m[k] = v
		}
	}
	return m
}

// login opens an authenticated SSH connection to the sidecar in its
// namespace, or fails the test.
func (lab *floodLab) login(t *testing.T) *gossh.Client {
	t.Helper()
	c, err := lab.tryLogin()
	if err != nil {
		t.Fatalf("login to the sidecar: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (lab *floodLab) tryLogin() (*gossh.Client, error) {
	var conn net.Conn
	err := testutil.RunInNetns(lab.side, func() (err error) {
		conn, err = net.DialTimeout("tcp", lab.listen, 10*time.Second)
		return err
	})
	if err != nil {
		return nil, err
	}
	sc, chans, reqs, err := gossh.NewClientConn(conn, lab.listen, lab.config)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return gossh.NewClient(sc, chans, reqs), nil
}

// floodCommand says it is ready, waits for a line on stdin, floods UDP
// datagrams of floodDatagram bytes at peer for floodDuration from an
// unconnected socket (so the peer's port unreachable replies cannot stop
// it), prints how many it sent, then the known block. stderr joins
// stdout: the block is all one stream.
func floodCommand(peer string) string {
	loop := fmt.Sprintf(`my $n = 0; my $end = time + %d; while (time < $end) { send(S, $p, 0, $d) and $n++ } print "%s$n\n";`,
		int(floodDuration/time.Second), floodSentPrefix)
	return fmt.Sprintf(`exec 2>&1; echo "FLOOD_READY_$((40+2))"; read go; perl -e '%s'; echo "FLOOD_DONE_$((40+2))"; seq 1 %d; echo "FLOOD_END_$((40+2))"`,
		udpPerl(peer, loop), afterFloodLines)
}

// udpPerl is a perl program (for perl -e '...': no single quotes) that
// runs loop with S an unconnected UDP socket, $d peer's port 9999 and $p
// a payload of floodDatagram bytes.
func udpPerl(peer, loop string) string {
	return fmt.Sprintf(`use Socket; socket(S, PF_INET, SOCK_DGRAM, 0) or die "socket: $!"; my $d = sockaddr_in(9999, inet_aton("%s")); my $p = "x" x %d; %s`,
		peer, floodDatagram, loop)
}

// expectedAfterFlood is every byte the flood session writes after the
// flood.
func expectedAfterFlood() []byte {
	var b bytes.Buffer
	b.WriteString(floodDoneLine)
	for i := 1; i <= afterFloodLines; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	b.WriteString(floodEndLine)
	return b.Bytes()
}

// floodSession is one running flood session, as its client sees it.
type floodSession struct {
	id             string
	s              *gossh.Session
	stdin          io.WriteCloser
	stdout, stderr testutil.LockedBuffer
	done           chan error
}

// startFlood starts the flood session id on c; it waits on its stdin.
func startFlood(t *testing.T, c *gossh.Client, id, peer string) *floodSession {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	t.Cleanup(func() { s.Close() })
	for k, v := range map[string]string{"APTL_RUN_ID": floodRun, "APTL_SESSION_ID": id} {
		if err := s.Setenv(k, v); err != nil {
			t.Fatalf("%s: setenv %s: %v", id, k, err)
		}
	}
	f := &floodSession{id: id, s: s, done: make(chan error, 1)}
	s.Stdout, s.Stderr = &f.stdout, &f.stderr
	if f.stdin, err = s.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(floodCommand(peer)); err != nil {
		t.Fatalf("%s: start: %v", id, err)
	}
	go func() { f.done <- s.Wait() }()
	return f
}

// waitReady waits until the session says it is ready to flood.
func (f *floodSession) waitReady(t *testing.T) {
	t.Helper()
	waitFor(t, 30*time.Second, f.id+"'s ready line", func() bool { return strings.Contains(f.stdout.String(), "FLOOD_READY_42\n") })
}

// release lets the session's flood start.
func (f *floodSession) release(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(f.stdin, "go\n"); err != nil {
		t.Fatalf("%s: %v", f.id, err)
	}
	f.stdin.Close()
}

// floodResult is what the client saw of one flood session.
type floodResult struct {
	id             string
	stdout, stderr []byte
	exit           error // Wait's: nil, *gossh.ExitError, *gossh.ExitMissingError
	err            error // the session did not end within its bound
}

// wait waits for the session's end, bounded.
func (f *floodSession) wait() floodResult {
	r := floodResult{id: f.id}
	select {
	case r.exit = <-f.done:
	case <-time.After(floodDuration + 90*time.Second):
		r.err = fmt.Errorf("the session had not ended %v after its flood should have", 90*time.Second)
	}
	r.stdout, r.stderr = []byte(f.stdout.String()), []byte(f.stderr.String())
	return r
}

// checkFloodRecord asserts one flood session's outcome and record and
// returns the bytes of transcript it lost after the flood.
func checkFloodRecord(t *testing.T, lab *floodLab, r floodResult) int {
	dir := filepath.Join(lab.root, floodRun, r.id)
	want := expectedAfterFlood()
	reason := waitClosed(t, dir)

	// What the client received after the flood: all of it, or the
	// session was cut by the full disk.
	if got := afterMarker(r.stdout); !bytes.Equal(got, want) {
		t.Errorf("the client received %d of the %d bytes the session wrote after the flood (first difference at %d; exit %v; the sidecar told it %q): a full disk must not end the session",
			sharedPrefixLen(got, want), len(want), firstDiff(got, want), r.exit, strings.TrimSpace(string(r.stderr)))
	}
	// What the typescript holds of it.
	ts, err := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile))
	if err != nil {
		t.Fatalf("the typescript: %v", err)
	}
	held := sharedPrefixLen(afterMarker(ts), want)
	lost := len(want) - held
	t.Logf("transcript after the flood: %d bytes written, %d in the typescript, %d lost; typescript %d bytes; close reason %q", len(want), held, lost, len(ts), reason)
	if lost != 0 {
		t.Errorf("the typescript (%d bytes) holds %d of the %d bytes written after the flood; %d lost: the transcript is the primary evidence, the witnesses must never cost it a byte (close reason %q)",
			len(ts), held, len(want), lost, reason)
	}

	// Finalized with an explicit reason, and verifying: ok (gaps listed),
	// never tampered or unfinalized.
	if !slices.Contains(vocab.CloseReasons, reason) {
		t.Errorf("close reason %q is not one of the vocabulary's %v: the record must say why it ended", reason, vocab.CloseReasons)
	}
	rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{lab.hostKey}}, evidence.Options{})
	t.Logf("verify: status %s, finalized %v, %d gaps, %d anomalies", rep.Status, rep.Finalized, len(rep.Gaps), len(rep.Anomalies))
	if rep.Status != evidence.StatusOK || !rep.Finalized {
		t.Errorf("verify says %s (finalized %v), want %s: a full disk must never make a record %s or %s; anomalies: %v",
			rep.Status, rep.Finalized, evidence.StatusOK, evidence.StatusTampered, evidence.StatusUnfinalized, firstAnomalies(rep, 5))
	}

	// The packets the volume could not hold are a pcap gap record.
	ev := readDiskEvidence(t, dir)
	t.Logf("the log's pcap gaps: %v; disk transitions: %v; lines that are not whole records: %d", ev.pcapGaps, ev.diskStates, ev.torn)
	if !slices.ContainsFunc(ev.pcapGapReasons(), func(r string) bool { return slices.Contains(wantPcapDiskGaps, r) }) {
		t.Errorf("no pcap gap record with a reason of %v (the log's pcap gaps: %v): every packet the volume could not hold must be a gap record", wantPcapDiskGaps, ev.pcapGaps)
	}
	if ev.torn != 0 {
		t.Errorf("the integrity log has %d lines that are not whole records: a record is written whole or not at all", ev.torn)
	}
	return lost
}

// waitClosed returns the close record's reason. The sidecar closes the
// record before it sends the exit status, so the record is closed once
// the client's session ended; the wait is only a bound on a slow disk.
// A record without a close record fails the test.
func waitClosed(t *testing.T, dir string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r, ok := closeReason(dir); ok {
			return r
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: no close record 10 s after the session ended: the record must be finalizable whatever the disk", dir)
			return ""
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// closeReason is the close record's reason in the session's log, and
// whether the log has a close record.
func closeReason(dir string) (string, bool) {
	b, _ := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
	for _, l := range bytes.Split(b, []byte("\n")) {
		var r integrity.Record
		if json.Unmarshal(l, &r) == nil && r.Type == vocab.TypeClose {
			return r.Attrs[vocab.HeaderCloseReason], true
		}
	}
	return "", false
}

// afterMarker is b from the flood's done line on, or nil without it.
func afterMarker(b []byte) []byte {
	if i := bytes.Index(b, []byte(floodDoneLine)); i >= 0 {
		return b[i:]
	}
	return nil
}

func sharedPrefixLen(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// floodSent is the count the flood printed, if the client saw it.
func floodSent(stdout []byte) (int, bool) {
	i := bytes.Index(stdout, []byte(floodSentPrefix))
	if i < 0 {
		return 0, false
	}
	line, _, _ := bytes.Cut(stdout[i+len(floodSentPrefix):], []byte("\n"))
	n, err := strconv.Atoi(string(line))
	return n, err == nil
}

func firstAnomalies(rep *evidence.Report, n int) []evidence.Anomaly {
	if len(rep.Anomalies) > n {
		return rep.Anomalies[:n]
	}
	return rep.Anomalies
}

// diskEvidence is what a session's integrity log says about its disk:
// its pcap gap records and its disk-state transitions, in order.
type diskEvidence struct {
	pcapGaps   []string // "reason count=N first..last"
	reasons    []string
	diskStates []string // each disk record's attributes
	torn       int      // lines that do not parse as a record
}

func (e diskEvidence) pcapGapReasons() []string { return e.reasons }

// readDiskEvidence reads a session's log as hostile input: a line that is
// not a whole record is counted, not trusted.
func readDiskEvidence(t *testing.T, dir string) diskEvidence {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
	if err != nil {
		t.Fatalf("the integrity log: %v", err)
	}
	defer f.Close()
	var ev diskEvidence
	rd := bufio.NewReader(io.LimitReader(f, 64<<20))
	for {
		line, err := rd.ReadBytes('\n')
		if len(line) > 0 {
			var r integrity.Record
			if !bytes.HasSuffix(line, []byte("\n")) || json.Unmarshal(line, &r) != nil {
				ev.torn++
			} else {
				switch {
				case r.Type == vocab.TypeGap && r.Attrs[vocab.AttrStream] == vocab.StreamPcap:
					ev.reasons = append(ev.reasons, r.Attrs[vocab.AttrReason])
					ev.pcapGaps = append(ev.pcapGaps, fmt.Sprintf("%s count=%s %s..%s", r.Attrs[vocab.AttrReason], r.Attrs[vocab.AttrCount], r.Attrs[vocab.AttrFirst], r.Attrs[vocab.AttrLast]))
				case r.Type == diskRecordType:
					ev.diskStates = append(ev.diskStates, fmt.Sprint(r.Attrs))
				}
			}
		}
		if err != nil {
			return ev
		}
	}
}

// peerRxBytes is the bytes the peer's interface has received.
func (lab *floodLab) peerRxBytes(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("ip", "-j", "-s", "-n", lab.peer, "link", "show", "dev", lab.peerLink).Output()
	if err != nil {
		t.Fatalf("ip -s link show %s in %s: %v", lab.peerLink, lab.peer, err)
	}
	var links []struct {
		Stats struct {
			RX struct {
				Bytes int `json:"bytes"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -j -s link show: %v: %s", err, out)
	}
	return links[0].Stats.RX.Bytes
}

// volumeState is the capture volume's free space, for the log: the disk
// states may keep it from filling, so it is reported, not asserted.
func (lab *floodLab) volumeState(t *testing.T) string {
	var st unix.Statfs_t
	if err := unix.Statfs(lab.root, &st); err != nil {
		t.Fatalf("statfs %s: %v", lab.root, err)
	}
	return fmt.Sprintf("%d of %d KiB free", st.Bavail*uint64(st.Bsize)>>10, st.Blocks*uint64(st.Bsize)>>10)
}

// checkNewSession opens session id on the full volume: it must record
// completely and verify, or be refused with a line that names the disk.
func (lab *floodLab) checkNewSession(t *testing.T, name, id string) {
	t.Run(name, func(t *testing.T) {
		t.Logf("the volume has %s", lab.volumeState(t))
		c := lab.login(t)
		// A short burst of packets first: the session's packet witness
		// meets the full volume too, as any lab traffic would make it.
		const lines, burst = 2000, 200
		cmd := fmt.Sprintf(`perl -e '%s'; seq 1 %d; echo "AFTER_$((40+2))"`, udpPerl(lab.peerAddr, fmt.Sprintf("for (1..%d) { send(S, $p, 0, $d) }", burst)), lines)
		res := rawExec(t, c, map[string]string{"APTL_RUN_ID": "diskfill", "APTL_SESSION_ID": id}, cmd)
		var want bytes.Buffer
		for i := 1; i <= lines; i++ {
			fmt.Fprintf(&want, "%d\n", i)
		}
		want.WriteString("AFTER_42\n")
		msg := strings.TrimSpace(res.stderr)
		t.Logf("the new session: started %v, exit status %d, %d bytes out, the sidecar said %q", res.started, res.status, len(res.stdout), msg)
		if res.stdout == "" {
			// Refused: the client's line and the sidecar's log must say
			// the disk is why.
			// The client may read the refusal before the sidecar's log
			// line is written: wait for it, bounded.
			var logged string
			deadline := time.Now().Add(5 * time.Second)
			for logged = lab.logLine("session=" + id + " "); logged == "" && time.Now().Before(deadline); logged = lab.logLine("session=" + id + " ") {
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("the sidecar logged: %s", logged)
			if !namesDisk(msg) {
				t.Errorf("a new session on the full volume was refused with %q, which does not name the disk: the refusal must say why (disk, space)", msg)
			}
			if !namesDisk(logged) {
				t.Errorf("the sidecar's log does not say the disk is why session %s was refused (its line: %q)", id, logged)
			}
			return
		}
		dir := filepath.Join(lab.root, "diskfill", id)
		reason := waitClosed(t, dir)
		if res.stdout != want.String() || res.status != 0 {
			t.Errorf("the new session ran but was cut: %d of %d bytes, exit status %d, close reason %q, the sidecar said %q",
				sharedPrefixLen([]byte(res.stdout), want.Bytes()), want.Len(), res.status, reason, msg)
		}
		ts, err := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.TypescriptFile))
		if err != nil {
			t.Fatalf("the new session's typescript: %v", err)
		}
		if !bytes.Contains(ts, want.Bytes()) {
			t.Errorf("the new session's typescript (%d bytes) does not hold the %d bytes it wrote: it must record completely or be refused", len(ts), want.Len())
		}
		if rep := evidence.Verify(dir, evidence.Keys{Trusted: []gossh.PublicKey{lab.hostKey}}, evidence.Options{}); rep.Status != evidence.StatusOK || !rep.Finalized {
			t.Errorf("the new session's record: verify says %s (finalized %v): anomalies %v", rep.Status, rep.Finalized, firstAnomalies(rep, 5))
		}
	})
}

// namesDisk reports whether a refusal says the disk is why.
func namesDisk(s string) bool { return strings.Contains(s, "disk") || strings.Contains(s, "space") }

// logLine is the sidecar's last log line that holds s, or "".
func (lab *floodLab) logLine(s string) string {
	lines := strings.Split(lab.logs.String(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

// checkStaysUp requires the sidecar alive, `health` passing in its
// namespace, and a further login.
func (lab *floodLab) checkStaysUp(t *testing.T) {
	t.Run("sidecar stays up", func(t *testing.T) {
		if err := lab.srv.Process.Signal(syscall.Signal(0)); err != nil || lab.srv.ProcessState != nil {
			t.Fatalf("the sidecar is gone after the flood: %v", err)
		}
		out, err := exec.Command("ip", "netns", "exec", lab.side, lab.bin, "health", "--ready-file", lab.ready, "--state-dir", lab.state).CombinedOutput()
		t.Logf("health: %s", strings.TrimSpace(string(out)))
		if err != nil {
			t.Errorf("health fails after the flood (%v): %s; a full disk must not make the orchestrator restart the sidecar", err, strings.TrimSpace(string(out)))
		}
		c, err := lab.tryLogin()
		if err != nil {
			t.Errorf("a further login fails after the flood: %v", err)
			return
		}
		c.Close()
	})
}
