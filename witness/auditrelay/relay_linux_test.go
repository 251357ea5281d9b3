package auditrelay

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/auditnetlink"
	"github.com/aptl/aptl-kali-capture/internal/relaywire"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// fakeKernel is the kernel's audit as the relay sees it, in memory.
type fakeKernel struct {
	mu      sync.Mutex
	rules   [][]byte
	sets    [][3]uint32
	status  []byte
	records chan []byte // datagrams; nil: an overrun
}

func newFakeKernel() *fakeKernel {
	st := make([]byte, 40)
	binary.NativeEndian.PutUint32(st[4:], 1)     // enabled
	binary.NativeEndian.PutUint32(st[24:], 3)    // lost
	binary.NativeEndian.PutUint32(st[20:], 8192) // backlog limit
	return &fakeKernel{status: st, records: make(chan []byte, 64)}
}

func (k *fakeKernel) StatusBytes() ([]byte, error) { return k.status, nil }
func (k *fakeKernel) Set(mask, enabled, backlog uint32) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sets = append(k.sets, [3]uint32{mask, enabled, backlog})
	return nil
}
func (k *fakeKernel) AddRule(b []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.rules {
		if bytes.Equal(r, b) {
			return syscall.EEXIST
		}
	}
	k.rules = append(k.rules, append([]byte(nil), b...))
	return nil
}
func (k *fakeKernel) DelRule(b []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, r := range k.rules {
		if bytes.Equal(r, b) {
			k.rules = append(k.rules[:i], k.rules[i+1:]...)
			return nil
		}
	}
	return syscall.ENOENT
}
func (k *fakeKernel) ListRules() ([][]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([][]byte(nil), k.rules...), nil
}
func (k *fakeKernel) Read(buf []byte, timeout time.Duration) ([]byte, error) {
	select {
	case b := <-k.records:
		if b == nil {
			return nil, auditnetlink.ErrOverrun
		}
		return buf[:copy(buf, b)], nil
	case <-time.After(timeout):
		return nil, nil
	}
}
func (k *fakeKernel) Close() error { return nil }

// relay serves k at a fresh socket, accepting peers as uid and gid, and
// returns the address a client with the relay's true credentials uses.
func relay(t *testing.T, k *fakeKernel, uid, gid int) (Peer, *testutil.LockedBuffer, context.CancelFunc) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "relay.sock")
	buf := &testutil.LockedBuffer{}
	log := slog.New(slog.NewTextHandler(buf, nil))
	s, err := Listen(Config{Socket: sock, PeerUID: uid, PeerGID: gid, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	s.openControl = func() (kernelControl, error) { return k, nil }
	s.openMulticast = func() (kernelRecords, error) { return k, nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve after its context ended: %v, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
	})
	return Peer{Socket: sock, UID: os.Getuid(), GID: os.Getgid()}, buf, cancel
}

func TestControlForwardsTheKernelsBytesAndErrnos(t *testing.T) {
	k := newFakeKernel()
	peer, _, _ := relay(t, k, os.Getuid(), os.Getgid())
	c, err := DialControl(peer)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status()
	if err != nil || st.Enabled != 1 || st.Lost != 3 || st.BacklogLimit != 8192 {
		t.Fatalf("status: %+v %v", st, err)
	}
	rule := []byte{0, 1, 2, 3, 4, 5, 6, 255}
	if err := c.AddRule(rule); err != nil {
		t.Fatal(err)
	}
	if err := c.AddRule(rule); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("the second add: %v, want the kernel's EEXIST", err)
	}
	listed, err := c.ListRules()
	if err != nil || len(listed) != 1 || !bytes.Equal(listed[0], rule) {
		t.Fatalf("list: %x %v", listed, err)
	}
	if err := c.Set(auditnetlink.StatusBacklog, 0, 16384); err != nil {
		t.Fatal(err)
	}
	if err := c.DelRule(rule); err != nil {
		t.Fatal(err)
	}
	if err := c.DelRule(rule); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("the second del: %v, want ENOENT", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.sets) != 1 || k.sets[0] != [3]uint32{auditnetlink.StatusBacklog, 0, 16384} || len(k.rules) != 0 {
		t.Fatalf("the kernel got sets %v, rules %x", k.sets, k.rules)
	}
}

// The relay takes only the sidecar's credentials: any other peer is closed
// before its hello is read, with no reply, and the refusal is logged.
func TestRelayRefusesAPeerOtherThanTheSidecar(t *testing.T) {
	peer, log, _ := relay(t, newFakeKernel(), os.Getuid(), os.Getgid()+1)
	_, err := DialControl(peer)
	if err == nil || !errors.Is(err, ErrDown) {
		t.Fatalf("dial as another gid: %v, want ErrDown", err)
	}
	if !testutil.WaitUntil(func() bool { return strings.Contains(log.String(), "only the sidecar's uid") }) {
		t.Fatalf("no refusal logged:\n%s", log)
	}
}

// The sidecar takes only the relay's credentials: a socket bound by anyone
// else gets no hello.
func TestClientRefusesARelayOfOtherCredentials(t *testing.T) {
	peer, _, _ := relay(t, newFakeKernel(), os.Getuid(), os.Getgid())
	peer.GID++
	_, err := DialRecords(peer)
	if err == nil || !strings.Contains(err.Error(), "only the witness relay's uid") {
		t.Fatalf("dial a relay of another gid: %v", err)
	}
}

func TestRecordsArriveInOrderWithTheirOverruns(t *testing.T) {
	k := newFakeKernel()
	peer, _, stop := relay(t, k, os.Getuid(), os.Getgid())
	r, err := DialRecords(peer)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	k.records <- []byte("first")
	k.records <- nil
	k.records <- []byte("second")
	buf := make([]byte, relaywire.MaxFrame)
	var got []string
	before := time.Now()
	for deadline := time.Now().Add(testutil.FailAfter); len(got) < 3 && time.Now().Before(deadline); {
		b, err := r.Read(buf, 100*time.Millisecond)
		var o *OverrunError
		switch {
		case errors.As(err, &o):
			if !errors.Is(err, auditnetlink.ErrOverrun) || o.Count != 1 {
				t.Fatalf("overrun: %v", err)
			}
			got = append(got, "overrun")
		case err != nil:
			t.Fatal(err)
		case b != nil:
			got = append(got, string(b))
		}
	}
	if strings.Join(got, ",") != "first,overrun,second" {
		t.Fatalf("records: %v", got)
	}
	// The fake kernel's socket is empty now: the relay says so, and the
	// client keeps the instant, after the records it sent before.
	if !testutil.WaitUntil(func() bool { r.Read(buf, 10*time.Millisecond); return r.Settled().After(before) }) {
		t.Fatalf("no idle frame after the records: settled %v", r.Settled())
	}
	stop()
	for deadline := time.Now().Add(testutil.FailAfter); time.Now().Before(deadline); {
		if _, err := r.Read(buf, 100*time.Millisecond); err != nil {
			if !errors.Is(err, ErrDown) {
				t.Fatalf("after the relay stopped: %v, want ErrDown", err)
			}
			return
		}
	}
	t.Fatal("the records connection outlived the relay")
}

// A control request the protocol does not allow ends the connection.
func TestRelayEndsAConnectionThatBreaksTheProtocol(t *testing.T) {
	peer, log, _ := relay(t, newFakeKernel(), os.Getuid(), os.Getgid())
	c, err := dial(peer, relaywire.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Write(relaywire.Encode(relaywire.TypeOverrun, 1), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	c.Unix().SetReadDeadline(time.Now().Add(testutil.FailAfter))
	if _, err := c.Read(relaywire.TypeDone); !errors.Is(err, relaywire.ErrClosed) {
		t.Fatalf("after a bad request: %v, want the relay's close", err)
	}
	if !testutil.WaitUntil(func() bool { return strings.Contains(log.String(), "unexpected overrun frame") }) {
		t.Fatalf("the protocol error is not logged:\n%s", log)
	}
}

func TestListenReplacesOnlyASocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-a-socket")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(Config{Socket: path}); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Fatalf("Listen over a file: %v", err)
	}
	sock := filepath.Join(t.TempDir(), "relay.sock")
	for range 2 {
		s, err := Listen(Config{Socket: sock})
		if err != nil {
			t.Fatalf("Listen over an old socket: %v", err)
		}
		s.Close()
	}
	if _, err := Listen(Config{Socket: sock, PeerUID: -1}); err == nil {
		t.Fatal("Listen took a peer uid of -1")
	}
}

func TestQueueDropsPastItsBound(t *testing.T) {
	q := newQueue(10)
	q.put([]byte("12345"))
	q.put([]byte("67890"))
	q.put([]byte("x")) // past the bound: counted
	q.put([]byte("z")) // and again: the same drop entry
	at := time.Unix(1796298833, 5)
	q.markIdle(at.Add(-time.Second))
	q.markIdle(at) // right behind another: replaces it
	if e, ok := q.take(); !ok || string(e.datagram) != "12345" || e.dropped != 0 {
		t.Fatalf("take: %+v %v", e, ok)
	}
	q.put([]byte("y")) // room again
	for _, want := range []entry{{datagram: []byte("67890")}, {dropped: 2}, {idle: at}, {datagram: []byte("y")}} {
		e, _ := q.take()
		if string(e.datagram) != string(want.datagram) || e.dropped != want.dropped || !e.idle.Equal(want.idle) {
			t.Fatalf("take: %+v, want %+v", e, want)
		}
	}
	q.shut()
	if _, ok := q.take(); ok {
		t.Fatal("take after shut")
	}
	// Drops in a row on an empty queue share one entry.
	q = newQueue(10)
	q.drop(1)
	q.drop(2)
	q.put([]byte("a"))
	if e, _ := q.take(); e.dropped != 3 {
		t.Fatalf("two drops on an empty queue: %d dropped in the first entry, want 3", e.dropped)
	}
}

// fakeRelay answers a client's hello with a welcome as the relay does, as
// the relay's uid and gid (this process's), then hands the connection to
// serve: a relay that breaks the protocol in ways the real one never does.
func fakeRelay(t *testing.T, serve func(c *relaywire.Conn)) Peer {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "fake.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			uc, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			c := relaywire.NewConn(uc)
			if _, err := c.Read(relaywire.TypeHello); err == nil && c.Write(relaywire.Encode(relaywire.TypeWelcome, relaywire.Version), time.Now().Add(time.Second)) == nil {
				serve(c)
			}
			c.Close()
		}
	}()
	return Peer{Socket: sock, UID: os.Getuid(), GID: os.Getgid()}
}

// The client refuses replies the protocol does not allow, and each ends
// the connection (ErrDown): two statuses, none, a listing past MaxListed.
func TestClientRefusesARelaysBadReplies(t *testing.T) {
	status := make([]byte, auditnetlink.StatusLen)
	statusFrame, _ := relaywire.EncodeBytes(relaywire.TypeStatusReply, status)
	for _, c := range []struct {
		name    string
		replies [][]byte
		call    func(*Control) error
		want    string
	}{
		{"two statuses", [][]byte{statusFrame, statusFrame, relaywire.Done(0, "")}, func(k *Control) error { _, err := k.Status(); return err }, "two status replies"},
		{"no status", [][]byte{relaywire.Done(0, "")}, func(k *Control) error { _, err := k.Status(); return err }, "without a status"},
		{"a status of StatusLen bytes", [][]byte{statusFrame, relaywire.Done(0, "")}, func(k *Control) error { _, err := k.Status(); return err }, ""},
		{"a bad errno", [][]byte{relaywire.Encode(relaywire.TypeDone, 1<<15)}, func(k *Control) error { return k.Set(1, 1, 0) }, "errno 32768"},
		{"the relay's own failure", [][]byte{relaywire.Done(0, "audit: no reply within 2s")}, func(k *Control) error { return k.Set(1, 1, 0) }, "witness relay: audit: no reply within 2s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			peer := fakeRelay(t, func(conn *relaywire.Conn) {
				if _, err := conn.Read(relaywire.TypeStatus, relaywire.TypeSet); err != nil {
					return
				}
				for _, r := range c.replies {
					conn.Write(r, time.Now().Add(time.Second))
				}
			})
			k, err := DialControl(peer)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			err = c.call(k)
			if c.want == "" {
				if err != nil {
					t.Fatalf("%v, want none", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want %q", err, c.want)
			}
		})
	}
}

// A listing is bounded: MaxListed rules are taken, one more ends the
// connection. Lived mutants not killed: request's read deadline (a relay
// that never answers fails after requestWait, 4 s, which no unit test
// waits out; TestLiveRelayKilledMidSession covers a relay that goes).
func TestClientBoundsTheListing(t *testing.T) {
	rule, _ := relaywire.EncodeBytes(relaywire.TypeRule, []byte{1})
	for _, n := range []int{auditnetlink.MaxListed, auditnetlink.MaxListed + 1} {
		peer := fakeRelay(t, func(conn *relaywire.Conn) {
			if _, err := conn.Read(relaywire.TypeListRules); err != nil {
				return
			}
			for range n {
				if conn.Write(rule, time.Now().Add(5*time.Second)) != nil {
					return
				}
			}
			conn.Write(relaywire.Done(0, ""), time.Now().Add(time.Second))
		})
		k, err := DialControl(peer)
		if err != nil {
			t.Fatal(err)
		}
		rules, err := k.ListRules()
		k.Close()
		if n == auditnetlink.MaxListed && (err != nil || len(rules) != n) {
			t.Errorf("a listing of %d rules: %d, %v", n, len(rules), err)
		}
		if n > auditnetlink.MaxListed && (err == nil || !errors.Is(err, ErrDown) || !strings.Contains(err.Error(), "more than")) {
			t.Errorf("a listing of %d rules: %v, want the connection ended", n, err)
		}
	}
}

// The kernel's refusal (auditnetlink returns it bare) is sent as its
// errno; the relay's own failure, an errno inside included, as a message.
func TestDoneTellsTheKernelsRefusalFromTheRelays(t *testing.T) {
	for _, c := range []struct {
		err   error
		errno uint32
		msg   string
	}{
		{nil, 0, ""},
		{syscall.EEXIST, uint32(syscall.EEXIST), ""},
		{fmt.Errorf("audit: read reply: %w", syscall.EAGAIN), 0, "audit: read reply: resource temporarily unavailable"},
		{errors.New("audit: no reply within 2s"), 0, "audit: no reply within 2s"},
	} {
		f, err := relaywire.Parse(done(c.err), relaywire.TypeDone)
		if err != nil {
			t.Fatal(err)
		}
		errno, msg, err := relaywire.ParseDone(f)
		if err != nil || errno != c.errno || msg != c.msg {
			t.Errorf("done(%v): errno %d message %q, want %d %q", c.err, errno, msg, c.errno, c.msg)
		}
	}
}
