package pcap

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/witness/witnessfs"
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

// laggingEngine is an engine whose ring never catches up with a closing
// session: it had delivered up to lag before the session's end.
type laggingEngine struct {
	idleEngine
	lag time.Duration
}

func (e laggingEngine) waitCaught(t time.Time) (time.Time, bool) { return t.Add(-e.lag), false }

// TestCatchUpTimeoutIsAGap: a session that closes before the capture
// caught up with it gets a pcap-catch-up-timeout gap record from the
// instant the ring had reached to its end; one whose capture caught up
// gets none.
func TestCatchUpTimeoutIsAGap(t *testing.T) {
	for _, c := range []struct {
		name string
		eng  engine
		want bool
	}{{"caught up", idleEngine{}, false}, {"lagging", laggingEngine{lag: 300 * time.Millisecond}, true}} {
		t.Run(c.name, func(t *testing.T) {
			tp := newTap(c.eng, testFiles(t, t.TempDir()), func() {})
			tp.Start()
			time.Sleep(time.Millisecond)
			var gaps []map[string]string
			before := time.Now()
			if _, err := tp.Close(func(typ string, a map[string]string) error {
				if typ == vocab.TypeGap {
					gaps = append(gaps, a)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !c.want {
				if len(gaps) != 0 {
					t.Errorf("gaps %v, want none", gaps)
				}
				return
			}
			if len(gaps) != 1 || gaps[0][vocab.AttrReason] != vocab.GapPcapCatchUp || gaps[0][vocab.AttrStream] != vocab.StreamPcap {
				t.Fatalf("gaps %v, want one %s", gaps, vocab.GapPcapCatchUp)
			}
			first, err1 := time.Parse(time.RFC3339Nano, gaps[0][vocab.AttrFirst])
			last, err2 := time.Parse(time.RFC3339Nano, gaps[0][vocab.AttrLast])
			// The ring had reached 300 ms before the end of a session 1 ms
			// long: the window starts at the session's start, not before.
			if err1 != nil || err2 != nil || last.Before(before) || !first.Equal(tp.start) {
				t.Errorf("window %s to %s (%v, %v): want from the session's start %s to its end", gaps[0][vocab.AttrFirst], gaps[0][vocab.AttrLast], err1, err2, witnessfs.Stamp(tp.start))
			}
		})
	}
}
