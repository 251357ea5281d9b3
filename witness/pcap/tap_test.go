package pcap

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// blindEngine is an engine that cannot capture (its socket would not
// bind).
type blindEngine struct{ idleEngine }

func (blindEngine) attach(*tap) error { return errors.New("pcap: start capturing: no socket") }

// TestSessionOfABlindEngine: when the engine cannot turn capture on, the
// session's open record says pcap unavailable and why, its window never
// opens (a packet handed to it anyway is not stored), and its close adds
// nothing to the close record.
func TestSessionOfABlindEngine(t *testing.T) {
	dir := t.TempDir()
	tp := newTap(blindEngine{}, testFiles(t, dir), func() {})
	attrs := tp.Start()
	if attrs[vocab.AttrPcap] != vocab.PcapUnavailable || attrs[vocab.AttrPcapReason] != "pcap: start capturing: no socket" {
		t.Fatalf("open record attributes %v, want pcap %s and the engine's reason", attrs, vocab.PcapUnavailable)
	}
	tp.deliver(&packet{ts: time.Now(), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 60), length: 60})
	var records []string
	closed, err := tp.Close(func(typ string, _ map[string]string) error { records = append(records, typ); return nil })
	if err != nil || closed != nil || records != nil {
		t.Fatalf("close: attributes %v, records %v, err %v; want none", closed, records, err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("the session's pcap folder holds %d files, want none", len(names))
	}
}
