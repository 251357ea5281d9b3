package audit

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/witness/auditrelay"
)

// startRelay serves the kernel's audit at sock, as the kali-witness
// container does, and returns its stop.
func startRelay(t *testing.T, sock string, log *slog.Logger) (stop func()) {
	t.Helper()
	s, err := auditrelay.Listen(auditrelay.Config{Socket: sock, PeerUID: os.Getuid(), PeerGID: os.Getgid(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx); close(done) }()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(testutil.FailAfter):
			t.Fatal("the relay did not stop")
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestLiveRelayKilledMidSession: the engine reaches the kernel only through
// the witness relay. The relay stops in the middle of a session: the
// engine says it is down, the session's record gets an audit-relay-down
// window from the last read that found it alive to its return, what the
// session ran meanwhile is not in its file (nothing listened), the rules
// stay in the kernel, and once a new relay serves the same socket the
// engine reconnects by itself and the session's next exec is recorded.
// At stop the engine removes its rules through the relay.
func TestLiveRelayKilledMidSession(t *testing.T) {
	ctl := requireAudit(t)
	root := t.TempDir()
	rs, err := ParseRules(strings.NewReader(fmt.Sprintf(labRules, t.TempDir())), "lab.rules")
	if err != nil {
		t.Fatal(err)
	}
	before, err := ctl.listRules()
	if err != nil {
		t.Fatal(err)
	}
	logBuf := &testutil.LockedBuffer{}
	log := slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sock := filepath.Join(t.TempDir(), "relay.sock")
	stopRelay := startRelay(t, sock, log)
	peer := &auditrelay.Peer{Socket: sock, UID: os.Getuid(), GID: os.Getgid()}
	eng, sess, _, signer := liveSessionOf(t, Config{Root: root, Rules: rs, Limits: liveLimits, Log: log, Relay: peer}, "relayed")
	if st := eng.Stats(); !st.Relayed || st.RelayDown {
		t.Fatalf("stats at start: %+v, want relayed and up", st)
	}

	dir := t.TempDir()
	step := func(name string) string { return filepath.Join(dir, name) }
	waitFor := func(name string) string {
		return fmt.Sprintf(`for i in $(seq 600); do [ -e %q ] && break; sleep 0.05; done; `, step(name))
	}
	ses, wait := sessionProcess(t, 4246, waitFor("go1")+`/bin/echo marker-before >/dev/null; `+
		waitFor("go2")+`/bin/echo marker-during >/dev/null; touch `+step("during-done")+`; `+
		waitFor("go3")+`/bin/echo marker-after >/dev/null`)
	if err := sess.BindAuditSession(ses); err != nil {
		t.Fatal(err)
	}
	touch := func(name string) {
		if err := os.WriteFile(step(name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	touch("go1")
	auditFile := filepath.Join(sess.Dir(), vocab.AuditDir, FileName(1))
	global := filepath.Join(root, vocab.AuditRootDir, vocab.AuditLogFile)
	if !testutil.WaitUntil(func() bool { b, _ := os.ReadFile(global); return bytes.Contains(b, []byte(`a1="marker-before"`)) }) {
		t.Fatalf("the exec before the relay's stop never reached _audit/audit.log; log:\n%s", logBuf)
	}

	killed := time.Now()
	stopRelay()
	if !testutil.WaitUntil(func() bool { return eng.Stats().RelayDown }) {
		t.Fatalf("the engine does not say the relay is down; log:\n%s", logBuf)
	}
	if listed, err := ctl.listRules(); err != nil || len(listed) <= len(before) {
		t.Errorf("with the relay gone the kernel lists %d rules (%v); before the witness %d: the witness's must stay", len(listed), err, len(before))
	}
	touch("go2")
	if !testutil.WaitUntil(func() bool { _, err := os.Stat(step("during-done")); return err == nil }) {
		t.Fatal("the session never ran its exec while the relay was down")
	}
	back := time.Now()
	startRelay(t, sock, log)
	if !testutil.WaitUntil(func() bool { return !eng.Stats().RelayDown }) {
		t.Fatalf("the engine did not reconnect to the new relay; log:\n%s", logBuf)
	}
	touch("go3")
	wait()
	time.Sleep(300 * time.Millisecond)
	if err := sess.Close(0); err != nil {
		t.Fatal(err)
	}

	rep := evidence.Verify(sess.Dir(), evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}, evidence.Options{})
	if !rep.OK() {
		t.Fatalf("verify: %v", rep.Anomalies)
	}
	var whole *evidence.Gap
	for i, g := range rep.Gaps {
		if g.Reason == vocab.GapAuditRelayDown && g.Error == "" && g.Last != "" {
			whole = &rep.Gaps[i]
		}
	}
	if whole == nil {
		t.Fatalf("the session's record has no closed %s window; gaps %+v", vocab.GapAuditRelayDown, rep.Gaps)
	}
	first, err1 := time.Parse(time.RFC3339Nano, whole.First)
	last, err2 := time.Parse(time.RFC3339Nano, whole.Last)
	if err1 != nil || err2 != nil || first.After(killed) || last.Before(back) || first.Before(killed.Add(-time.Second)) {
		t.Errorf("relay window %s to %s; the relay stopped at %s and came back after %s", whole.First, whole.Last,
			killed.UTC().Format(time.RFC3339Nano), back.UTC().Format(time.RFC3339Nano))
	}
	session, _ := os.ReadFile(auditFile)
	for marker, want := range map[string]bool{"marker-before": true, "marker-during": false, "marker-after": true} {
		if got := bytes.Contains(session, []byte(`a1="`+marker+`"`)); got != want {
			t.Errorf("%s in the session's audit file: %v, want %v", marker, got, want)
		}
	}
	gaps, _ := os.ReadFile(filepath.Join(root, vocab.AuditRootDir, "gaps.log"))
	if !bytes.Contains(gaps, []byte("reason="+vocab.GapAuditRelayDown+" ")) {
		t.Errorf("_audit/gaps.log has no relay window:\n%s", gaps)
	}
	if err := eng.Close(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if after, err := ctl.listRules(); err != nil || len(after) != len(before) {
		t.Errorf("rules before the witness: %d, after it stopped: %d (%v)", len(before), len(after), err)
	}
}
