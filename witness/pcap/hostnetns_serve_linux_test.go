package pcap_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/witness/pcap"
)

// freeLoopback is a loopback address whose port nothing listens on now.
func freeLoopback(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServeCapturesOnlyInANamespaceOfItsOwn: the real binary captures in
// a lab's namespace by default; in the host's initial namespace it says
// at start that pcap is off and why, readiness says pcap=disabled with
// the reason, a session's open record says pcap disabled with the reason
// and the session verifies with no pcap files; with --pcap-host-netns's
// environment variable it captures there too.
func TestServeCapturesOnlyInANamespaceOfItsOwn(t *testing.T) {
	requireNetns(t)
	t.Run("a lab's namespace", func(t *testing.T) {
		l := newLab(t)
		s := serve(t, l.side, "0.0.0.0:2222", nil)
		if got := s.readiness(); got["pcap"] != "ok" || got["pcap_reason"] != "" {
			t.Fatalf("readiness pcap=%q pcap_reason=%q, want ok", got["pcap"], got["pcap_reason"])
		}
	})
	t.Run("the host's initial namespace", func(t *testing.T) {
		pcap.RequireHostNetns(t)
		addr := freeLoopback(t)
		s := serve(t, "", addr, nil)
		ready := s.readiness()
		if ready["pcap"] != "disabled" || !strings.Contains(ready["pcap_reason"], "host's initial network namespace") {
			t.Fatalf("readiness pcap=%q pcap_reason=%q, want disabled with the reason", ready["pcap"], ready["pcap_reason"])
		}
		if !strings.Contains(s.stderr.String(), `msg="pcap capture off; sessions are recorded without packets" reason="serve runs in the host's initial network namespace`) {
			t.Errorf("serve's log does not say at start that pcap is off and why:\n%s", s.stderr.String())
		}
		sess := s.open("", addr, "run1", "hostns")
		if _, err := sess.stdin.Write([]byte("typed on the host\n")); err != nil {
			t.Fatal(err)
		}
		s.end(sess)
		log, _ := os.ReadFile(filepath.Join(sess.dir, "pty", "integrity.jsonl"))
		if !strings.Contains(string(log), `"pcap":"disabled"`) || !strings.Contains(string(log), `"pcap_reason":"serve runs in the host's initial network namespace`) {
			t.Errorf("the open record does not say pcap is disabled and why:\n%.800s", log)
		}
		if _, err := os.Stat(filepath.Join(sess.dir, "pcap")); !os.IsNotExist(err) {
			t.Errorf("the session has a pcap folder (%v)", err)
		}
		rep := verifyOK(t, sess.dir, s.hostPub)
		if rep.Pcap == nil || rep.Pcap.State != "disabled" || !strings.Contains(rep.Pcap.Reason, "initial network namespace") {
			t.Errorf("verify's pcap report: %+v", rep.Pcap)
		}
	})
	t.Run("the host's initial namespace with the setting", func(t *testing.T) {
		pcap.RequireHostNetns(t)
		s := serve(t, "", freeLoopback(t), []string{"APTL_CAPTURE_PCAP_HOST_NETNS=1"})
		if got := s.readiness(); got["pcap"] != "ok" || got["pcap_reason"] != "" {
			t.Fatalf("readiness pcap=%q pcap_reason=%q, want ok", got["pcap"], got["pcap_reason"])
		}
		if !strings.Contains(s.stderr.String(), "pcap captures in the host's initial network namespace (--pcap-host-netns)") {
			t.Errorf("serve's log does not warn that it captures the host's packets:\n%s", s.stderr.String())
		}
	})
}
